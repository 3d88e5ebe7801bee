// Report rows -> chart series and totals; budgets -> burn-down figures (pure; unit-tested).
import type { Budget, Report } from '../gen/trainyard/v1/accounting';
import { addMicros } from './format';

export interface Series {
  key: string;
  /** Cost per period in micros (exact, as strings); charts convert to numbers. */
  micros: string[];
  lostMicros: string[];
}

export interface ReportSeries {
  /** Period starts, epoch seconds, ascending. */
  x: number[];
  series: Series[];
}

/** One series per key (the dimensions joined with " / "), one point per period. */
export function reportSeries(report: Report | undefined): ReportSeries {
  const rows = report?.rows ?? [];
  const periods = [...new Set(rows.map((r) => r.periodStart ?? ''))].filter(Boolean).sort();
  const index = new Map(periods.map((p, i) => [p, i]));
  const byKey = new Map<string, Series>();
  for (const r of rows) {
    const key = (r.keys ?? []).map((k) => k || '(none)').join(' / ') || 'total';
    const s = byKey.get(key) ?? {
      key,
      micros: periods.map(() => '0'),
      lostMicros: periods.map(() => '0'),
    };
    const i = index.get(r.periodStart ?? '');
    if (i !== undefined) {
      s.micros[i] = addMicros(s.micros[i], r.cost?.micros);
      s.lostMicros[i] = addMicros(s.lostMicros[i], r.lostWorkCost?.micros);
    }
    byKey.set(key, s);
  }
  const series = [...byKey.values()].sort((a, b) => {
    const ta = BigInt(addMicros(...a.micros));
    const tb = BigInt(addMicros(...b.micros));
    return ta === tb ? a.key.localeCompare(b.key) : tb > ta ? 1 : -1;
  });
  return { x: periods.map((p) => Math.floor(new Date(p).getTime() / 1000)), series };
}

/** Totals per key over the whole window (cost, tenant cost, lost work, GPU-hours). */
export interface KeyTotal {
  key: string;
  cost: string;
  tenantCost: string;
  lostWork: string;
  idle: string;
  gpuSeconds: number;
  lostGpuSeconds: number;
  attempts: number;
}

export function keyTotals(report: Report | undefined): KeyTotal[] {
  const m = new Map<string, KeyTotal>();
  for (const r of report?.rows ?? []) {
    const key = (r.keys ?? []).map((k) => k || '(none)').join(' / ') || 'total';
    const t = m.get(key) ?? {
      key,
      cost: '0',
      tenantCost: '0',
      lostWork: '0',
      idle: '0',
      gpuSeconds: 0,
      lostGpuSeconds: 0,
      attempts: 0,
    };
    t.cost = addMicros(t.cost, r.cost?.micros);
    t.tenantCost = addMicros(t.tenantCost, r.tenantCost?.micros);
    t.lostWork = addMicros(t.lostWork, r.lostWorkCost?.micros);
    t.idle = addMicros(t.idle, r.idleCost?.micros);
    t.gpuSeconds += Number(r.gpuSeconds ?? 0);
    t.lostGpuSeconds += Number(r.lostGpuSeconds ?? 0);
    t.attempts += Number(r.attempts ?? 0);
    m.set(key, t);
  }
  return [...m.values()].sort((a, b) => (BigInt(b.cost) > BigInt(a.cost) ? 1 : BigInt(b.cost) < BigInt(a.cost) ? -1 : 0));
}

export interface BudgetBurn {
  /** Spent and forecast as percent of the monthly amount (1 decimal). */
  spentPct: number;
  forecastPct: number;
  /** Percent of the month gone. */
  monthPct: number;
  /** The highest threshold the forecast has reached, if any. */
  reached?: { percent: number; action: string };
  remainingMicros: string;
}

export function budgetBurn(b: Budget, now: Date = new Date()): BudgetBurn {
  const amount = BigInt(b.monthlyAmount?.micros ?? '0');
  const spent = BigInt(b.spent?.micros ?? '0');
  const forecast = BigInt(b.forecast?.micros ?? '0');
  const pct = (v: bigint) => (amount > 0n ? Number((v * 1000n) / amount) / 10 : 0);
  const start = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
  const end = Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1);
  const monthPct = Math.round(((now.getTime() - start) / (end - start)) * 1000) / 10;
  const forecastPct = pct(forecast > spent ? forecast : spent);
  let reached: BudgetBurn['reached'];
  for (const t of b.thresholds ?? []) {
    const p = t.percent ?? 0;
    if (forecastPct >= p && (!reached || p > reached.percent)) {
      reached = { percent: p, action: String(t.action ?? 'BUDGET_ACTION_WARN') };
    }
  }
  return { spentPct: pct(spent), forecastPct, monthPct, reached, remainingMicros: (amount - spent).toString() };
}
