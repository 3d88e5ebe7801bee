import { useMemo, useState } from 'react';
import { useParams } from 'react-router';
import { useQuery } from '@tanstack/react-query';
import { exportReport, getInvoice, getReport, listBudgets } from '../api/client';
import { errorText } from '../api/errors';
import type { Budget, GetReportRequest, ReportDimension, ReportStep } from '../gen/trainyard/v1/accounting';
import { useSession } from '../session';
import { capabilities } from '../lib/roles';
import { enumLabel, formatElapsed, formatMicros, formatMoney, lastSegment, microsToUnits, formatAxisMoney } from '../lib/format';
import { budgetBurn, cumulativeByDay, keyTotals, reportSeries } from '../lib/report';
import { Empty, ErrorBox, Loading } from '../components/States';
import { Badge } from '../components/StateBadge';
import { TimeChart, type ChartSeries } from '../components/Chart';
import { tenantLabel } from '../components/Layout';

type Range = '7d' | '30d' | '90d' | 'month' | 'lastMonth';
const RANGES: Record<Range, string> = {
  '7d': 'Last 7 days',
  '30d': 'Last 30 days',
  '90d': 'Last 90 days',
  month: 'This month',
  lastMonth: 'Last month',
};

function rangeWindow(r: Range, now = new Date()): { start: string; end: string } {
  // Whole UTC hours, so that every step (hour, day, month) lines up.
  const hour = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate(), now.getUTCHours() + 1);
  const iso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');
  const days = (n: number) => ({ start: iso(hour - n * 86400_000), end: iso(hour) });
  switch (r) {
    case '7d':
      return days(7);
    case '30d':
      return days(30);
    case '90d':
      return days(90);
    case 'month':
      return { start: iso(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)), end: iso(hour) };
    case 'lastMonth':
      return {
        start: iso(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1)),
        end: iso(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)),
      };
  }
}

const DIMENSIONS: [ReportDimension | string, string][] = [
  ['REPORT_DIMENSION_PROJECT', 'Project'],
  ['REPORT_DIMENSION_TENANT', 'Tenant'],
  ['REPORT_DIMENSION_QUEUE', 'Queue'],
  ['REPORT_DIMENSION_USER', 'User'],
  ['REPORT_DIMENSION_FLAVOR', 'Flavor'],
  ['REPORT_DIMENSION_CLUSTER', 'Cluster'],
];

export function CostsPage() {
  const { tenant = '' } = useParams();
  const s = useSession();
  const caps = capabilities(s.caller, tenant);
  const [range, setRange] = useState<Range>('30d');
  const [step, setStep] = useState<ReportStep | string>('REPORT_STEP_DAY');
  const [dim, setDim] = useState<ReportDimension | string>(tenant === '-' ? 'REPORT_DIMENSION_TENANT' : 'REPORT_DIMENSION_PROJECT');
  const win = useMemo(() => rangeWindow(range), [range]);
  const request: GetReportRequest = {
    parent: `tenants/${tenant}`,
    startTime: win.start,
    endTime: win.end,
    groupBy: [dim as ReportDimension],
    step: step as ReportStep,
  };
  const reportQ = useQuery({
    queryKey: ['report', tenant, request],
    queryFn: () => getReport(tenant, request),
    enabled: caps.readCosts,
  });
  const report = reportQ.data;
  const currency = report?.currency || report?.total?.cost?.currencyCode || '';
  const rs = useMemo(() => reportSeries(report), [report]);
  const totals = useMemo(() => keyTotals(report), [report]);
  const chartSeries = useMemo<ChartSeries[]>(() => {
    const top = rs.series.slice(0, 7).map((se) => ({ label: se.key, values: se.micros.map((m) => microsToUnits(m)) }));
    const rest = rs.series.slice(7);
    if (rest.length) {
      top.push({
        label: `${rest.length} others`,
        values: rs.x.map((_, i) => rest.reduce((a, se) => a + microsToUnits(se.micros[i]), 0)),
      });
    }
    return top;
  }, [rs]);
  const lostSeries = useMemo<ChartSeries[]>(
    () => [
      {
        label: 'Lost work',
        color: '#c0392b',
        values: rs.x.map((_, i) => rs.series.reduce((a, se) => a + microsToUnits(se.lostMicros[i]), 0)),
      },
    ],
    [rs],
  );
  const money = useMemo(() => (v: number) => formatAxisMoney(v, currency), [currency]);
  // The charts span the report's window, not only the periods that had spend.
  const xRange = useMemo<[number, number]>(
    () => [Date.parse(win.start) / 1000, Date.parse(win.end) / 1000],
    [win.start, win.end],
  );

  const [downloading, setDownloading] = useState('');
  const [downloadError, setDownloadError] = useState('');
  const download = async (format: 'REPORT_FORMAT_CSV' | 'REPORT_FORMAT_JSON') => {
    setDownloading(format);
    setDownloadError('');
    try {
      const blob = await exportReport(tenant, request, format);
      const url = URL.createObjectURL(blob);
      const a = document.createElement('a');
      a.href = url;
      a.download = `trainyard-${tenant === '-' ? 'all' : tenant}-${win.start.slice(0, 10)}-${win.end.slice(0, 10)}.${format === 'REPORT_FORMAT_CSV' ? 'csv' : 'json'}`;
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (e) {
      setDownloadError(errorText(e));
    } finally {
      setDownloading('');
    }
  };

  if (!caps.readCosts) {
    return (
      <>
        <h1>Costs</h1>
        <Empty>Costs are for finance, tenant admins and platform admins; your roles in {tenantLabel(tenant)} do not include them.</Empty>
      </>
    );
  }

  return (
    <>
      <h1>Costs {tenant === '-' ? 'of every tenant' : `of ${tenant}`}</h1>
      <form className="toolbar" aria-label="Report settings" onSubmit={(e) => e.preventDefault()}>
        <label className="inline-field">
          <span>Period</span>
          <select value={range} onChange={(e) => setRange(e.target.value as Range)} data-testid="cost-range">
            {Object.entries(RANGES).map(([k, v]) => (
              <option key={k} value={k}>
                {v}
              </option>
            ))}
          </select>
        </label>
        <label className="inline-field">
          <span>Step</span>
          <select value={step} onChange={(e) => setStep(e.target.value)} data-testid="cost-step">
            <option value="REPORT_STEP_HOUR">Hour</option>
            <option value="REPORT_STEP_DAY">Day</option>
            <option value="REPORT_STEP_MONTH">Month</option>
          </select>
        </label>
        <label className="inline-field">
          <span>Group by</span>
          <select value={dim} onChange={(e) => setDim(e.target.value)} data-testid="cost-group">
            {DIMENSIONS.map(([k, v]) => (
              <option key={k} value={k}>
                {v}
              </option>
            ))}
          </select>
        </label>
        <span className="toolbar-sep" />
        <button type="button" onClick={() => void download('REPORT_FORMAT_CSV')} disabled={!!downloading} data-testid="download-csv">
          {downloading === 'REPORT_FORMAT_CSV' ? 'Preparing…' : 'Download CSV (FOCUS)'}
        </button>
        <button type="button" onClick={() => void download('REPORT_FORMAT_JSON')} disabled={!!downloading} data-testid="download-json">
          {downloading === 'REPORT_FORMAT_JSON' ? 'Preparing…' : 'Download JSON'}
        </button>
      </form>
      {downloadError && (
        <div className="notice notice-warn" role="alert">
          Download failed: {downloadError}
        </div>
      )}

      {reportQ.isPending ? (
        <Loading label="Computing the report…" />
      ) : reportQ.error ? (
        <ErrorBox error={reportQ.error} retry={() => void reportQ.refetch()} />
      ) : (
        <>
          <div className="stats" data-testid="cost-totals">
            <div className="stat">
              <span className="stat-label">Total cost</span>
              <span className="stat-value">{formatMoney(report?.total?.cost, 2, currency)}</span>
            </div>
            <div className="stat">
              <span className="stat-label">Charged to tenants</span>
              <span className="stat-value">{formatMoney(report?.total?.tenantCost, 2, currency)}</span>
            </div>
            <div className="stat">
              <span className="stat-label">Lost to interruptions</span>
              <span className="stat-value">{formatMoney(report?.total?.lostWorkCost, 2, currency)}</span>
              <span className="small muted">{formatElapsed(Number(report?.total?.lostGpuSeconds ?? 0))} GPU time</span>
            </div>
            <div className="stat">
              <span className="stat-label">GPU-hours</span>
              <span className="stat-value">{Number(report?.total?.gpuHours ?? 0).toFixed(1)}</span>
              <span className="small muted">
                at {formatMoney(report?.total?.effectiveGpuHourPrice, 2, currency)} per GPU-hour
              </span>
            </div>
          </div>
          {rs.x.length === 0 ? (
            <Empty>No usage in this period.</Empty>
          ) : (
            <div className="cols">
              <section className="card" aria-labelledby="spend-h">
                <h2 id="spend-h">Spend by {DIMENSIONS.find(([k]) => k === dim)?.[1].toLowerCase()}</h2>
                <TimeChart x={rs.x} series={chartSeries} label="Spend per period by group" yFormat={money} bars={rs.x.length <= 31} xRange={xRange} testId="spend-chart" />
              </section>
              <section className="card" aria-labelledby="lost-h">
                <h2 id="lost-h">Work lost to interruptions</h2>
                <TimeChart x={rs.x} series={lostSeries} label="Cost of lost work per period" yFormat={money} bars xRange={xRange} testId="lost-chart" />
              </section>
            </div>
          )}
          {totals.length > 0 && (
            <div className="table-wrap">
              <table className="grid" data-testid="cost-table">
                <caption className="sr-only">Totals per group over the period</caption>
                <thead>
                  <tr>
                    <th>{DIMENSIONS.find(([k]) => k === dim)?.[1]}</th>
                    <th className="num">Cost</th>
                    <th className="num">Charged</th>
                    <th className="num">Lost work</th>
                    <th className="num">GPU-hours</th>
                    <th className="num">Attempts</th>
                  </tr>
                </thead>
                <tbody>
                  {totals.map((t) => (
                    <tr key={t.key}>
                      <td>{t.key}</td>
                      <td className="num">{formatMicros(t.cost)} {currency}</td>
                      <td className="num">{formatMicros(t.tenantCost)}</td>
                      <td className="num">{formatMicros(t.lostWork)}</td>
                      <td className="num">{(t.gpuSeconds / 3600).toFixed(2)}</td>
                      <td className="num">{t.attempts}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
      <Budgets tenant={tenant} />
      {tenant !== '-' && <InvoiceView tenant={tenant} />}
    </>
  );
}

function Budgets({ tenant }: { tenant: string }) {
  const q = useQuery({ queryKey: ['budgets', tenant], queryFn: () => listBudgets(tenant), refetchInterval: 60_000 });
  return (
    <section aria-labelledby="budgets-h">
      <h2 id="budgets-h">Budgets this month</h2>
      {q.isPending ? (
        <Loading />
      ) : q.error ? (
        <ErrorBox error={q.error} />
      ) : (q.data?.budgets ?? []).length === 0 ? (
        <Empty>No budgets. Finance or a tenant admin sets them with yard budget set.</Empty>
      ) : (
        <div className="queue-grid">
          {(q.data?.budgets ?? []).map((b) => (
            <BudgetCard key={b.name} budget={b} />
          ))}
        </div>
      )}
    </section>
  );
}

function BudgetCard({ budget: b }: { budget: Budget }) {
  const burn = budgetBurn(b);
  const id = lastSegment(b.name);
  const scale = Math.max(100, burn.forecastPct, ...(b.thresholds ?? []).map((t) => t.percent ?? 0));
  const pct = (v: number) => `${(Math.min(v, scale) / scale) * 100}%`;
  const action = b.activeAction && b.activeAction !== 'BUDGET_ACTION_UNSPECIFIED' ? b.activeAction : '';
  const text = `${formatMoney(b.spent, 2, b.monthlyAmount?.currencyCode)} spent (${burn.spentPct}%), forecast ${formatMoney(b.forecast, 2, b.monthlyAmount?.currencyCode)} (${burn.forecastPct}%) of ${formatMoney(b.monthlyAmount)}; ${burn.monthPct}% of the month gone`;
  return (
    <article className="card" data-testid={`budget-${id}`} aria-labelledby={`b-${id}`}>
      <h3 id={`b-${id}`}>
        {id} <span className="muted small">{b.project ? `project ${b.project}` : 'whole tenant'}</span>{' '}
        {action && (
          <Badge tone={action === 'BUDGET_ACTION_HOLD' ? 'bad' : 'warn'}>{enumLabel(action, 'BUDGET_ACTION_')}</Badge>
        )}
      </h3>
      <div className="usage-bar budget-bar" role="img" aria-label={text}>
        <span className="u-used" style={{ width: pct(burn.spentPct) }} />
        <span className="u-forecast" style={{ width: pct(Math.max(0, burn.forecastPct - burn.spentPct)) }} />
        <span className="u-today" style={{ left: pct(burn.monthPct) }} title="today" />
        {(b.thresholds ?? []).map((t) => (
          <span key={t.percent} className="u-threshold" style={{ left: pct(t.percent ?? 0) }} title={`${t.percent}%: ${enumLabel(t.action, 'BUDGET_ACTION_')}`} />
        ))}
      </div>
      <p className="small">{text}.</p>
      <ul className="plain small">
        {(b.thresholds ?? []).map((t) => (
          <li key={t.percent}>
            at {t.percent}%: {enumLabel(t.action ?? 'BUDGET_ACTION_WARN', 'BUDGET_ACTION_').toLowerCase()}
            {burn.reached?.percent === t.percent ? ' ← forecast has reached this' : ''}
          </li>
        ))}
        {b.userHourlyCap && b.userHourlyCap.micros && b.userHourlyCap.micros !== '0' && (
          <li>per-user cap: {formatMoney(b.userHourlyCap)} per hour</li>
        )}
      </ul>
      <BurnDown budget={b} />
    </article>
  );
}

/** The month's cumulative spend in the budget's scope against its amount and thresholds. */
function BurnDown({ budget: b }: { budget: Budget }) {
  const [open, setOpen] = useState(false);
  const tenant = b.name?.split('/')[1] ?? '';
  const now = new Date();
  const monthStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  const days = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 0)).getUTCDate();
  const end = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate(), now.getUTCHours() + 1));
  const request: GetReportRequest = {
    parent: `tenants/${tenant}`,
    startTime: monthStart.toISOString().replace('.000Z', 'Z'),
    endTime: end.toISOString().replace('.000Z', 'Z'),
    step: 'REPORT_STEP_DAY' as ReportStep,
    project: b.project || undefined,
  };
  const q = useQuery({ queryKey: ['burn', b.name, request], queryFn: () => getReport(tenant, request), enabled: open });
  const chart = useMemo(() => {
    const { x, micros } = cumulativeByDay(q.data, monthStart, days);
    const today = now.getUTCDate() - 1;
    const amount = microsToUnits(b.monthlyAmount?.micros);
    const spentToday = microsToUnits(micros[today]);
    const forecast = microsToUnits(b.forecast?.micros);
    const series: ChartSeries[] = [
      { label: 'Spent', values: micros.map((m, i) => (i <= today ? microsToUnits(m) : null)) },
      {
        label: 'Forecast',
        dash: true,
        color: '#8a63d2',
        values: x.map((_, i) => (i < today ? null : spentToday + ((forecast - spentToday) * (i - today)) / Math.max(1, days - 1 - today))),
      },
      { label: 'Budget', color: '#505861', values: x.map(() => amount) },
      ...(b.thresholds ?? []).map((t) => ({
        label: `${t.percent}% ${enumLabel(t.action ?? 'BUDGET_ACTION_WARN', 'BUDGET_ACTION_').toLowerCase()}`,
        color: '#c0392b',
        dash: true,
        values: x.map(() => (amount * (t.percent ?? 0)) / 100),
      })),
    ];
    return { x, series };
    // The month and today are fixed for the life of the card.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [q.data, b]);
  const currency = b.monthlyAmount?.currencyCode ?? '';
  const fmt = useMemo(() => {
    const compact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 });
    return (v: number) => `${compact.format(v)} ${currency}`.trim();
  }, [currency]);
  return (
    <details onToggle={(e) => setOpen((e.target as HTMLDetailsElement).open)}>
      <summary data-testid={`burn-${lastSegment(b.name)}`}>Burn-down this month</summary>
      {!open ? null : q.isPending ? (
        <Loading />
      ) : q.error ? (
        <ErrorBox error={q.error} />
      ) : (
        <TimeChart x={chart.x} series={chart.series} height={220} label={`Spend this month against budget ${lastSegment(b.name)}`} yFormat={fmt} />
      )}
    </details>
  );
}

function InvoiceView({ tenant }: { tenant: string }) {
  const now = new Date();
  const months = [0, 1, 2, 3].map((i) => {
    const d = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - i, 1));
    return d.toISOString().slice(0, 7);
  });
  const [month, setMonth] = useState(months[0] as string);
  const q = useQuery({ queryKey: ['invoice', tenant, month], queryFn: () => getInvoice(tenant, month) });
  const inv = q.data;
  return (
    <section aria-labelledby="inv-h">
      <div className="page-head">
        <h2 id="inv-h">Invoice</h2>
        <label className="inline-field">
          <span>Month</span>
          <select value={month} onChange={(e) => setMonth(e.target.value)} data-testid="invoice-month">
            {months.map((m) => (
              <option key={m} value={m}>
                {m}
              </option>
            ))}
          </select>
        </label>
      </div>
      {q.isPending ? (
        <Loading />
      ) : q.error ? (
        <ErrorBox error={q.error} />
      ) : inv ? (
        <>
          <p>
            <strong>{inv.invoiceNumber}</strong>{' '}
            <Badge tone={inv.status === 'INVOICE_STATUS_FINAL' ? 'ok' : 'pending'}>
              {enumLabel(inv.status ?? 'INVOICE_STATUS_DRAFT', 'INVOICE_STATUS_')}
            </Badge>{' '}
            total <strong>{formatMoney(inv.total, 2, inv.currency)}</strong>; lost work absorbed by the platform{' '}
            {formatMoney(inv.platformCost, 2, inv.currency)}.
          </p>
          {(inv.lines ?? []).length === 0 ? (
            <Empty>No usage in {month}.</Empty>
          ) : (
            <div className="table-wrap">
              <table className="grid" data-testid="invoice-lines">
                <thead>
                  <tr>
                    <th>Project</th>
                    <th>SKU</th>
                    <th className="num">Quantity</th>
                    <th className="num">Cost</th>
                    <th className="num">List cost</th>
                    <th className="num">Lost work</th>
                  </tr>
                </thead>
                <tbody>
                  {(inv.lines ?? []).map((l) => (
                    <tr key={`${l.project}-${l.sku}`}>
                      <td>{l.project}</td>
                      <td className="mono">{l.sku}</td>
                      <td className="num">
                        {Number(l.quantity ?? 0).toFixed(2)} {l.unit}
                      </td>
                      <td className="num">{formatMoney(l.cost, 2, inv.currency)}</td>
                      <td className="num">{formatMoney(l.listCost, 2, inv.currency)}</td>
                      <td className="num">{formatMoney(l.lostWorkCost, 2, inv.currency)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      ) : null}
    </section>
  );
}
