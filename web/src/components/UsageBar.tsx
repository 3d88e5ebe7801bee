// A quota bar: used within nominal, borrowed above it, unused nominal that other queues of the
// cohort use now (lent), the rest of the unused nominal (lendable up to the lending limit); the
// nominal mark. Numbers are also given as text, so the bar is never the only carrier.
import { formatBytes, formatCpu } from '../lib/format';

export function formatResource(resource: string | undefined, v: number): string {
  if (resource === 'RESOURCE_NAME_CPU') return `${formatCpu(v)} CPU`;
  if (resource === 'RESOURCE_NAME_MEMORY') return formatBytes(v);
  return `${v} GPU${v === 1 ? '' : 's'}`;
}

export function UsageBar(p: {
  label: string;
  resource?: string;
  used: number;
  nominal: number;
  borrowed: number;
  /** Of the unused nominal, what other queues of the cohort use now (QueueStatus usage.lent). */
  lent?: number;
  lendingLimit?: number;
  testId?: string;
}) {
  const withinNominal = Math.max(0, p.used - p.borrowed);
  const idle = Math.max(0, p.nominal - withinNominal);
  const scale = Math.max(1, p.nominal, p.used);
  const pct = (v: number) => `${(v / scale) * 100}%`;
  const lendable = p.lendingLimit === undefined ? idle : Math.min(idle, p.lendingLimit);
  const lent = Math.min(Math.max(0, p.lent ?? 0), lendable);
  const text =
    `${formatResource(p.resource, p.used)} used of ${formatResource(p.resource, p.nominal)} nominal` +
    (p.borrowed > 0 ? `, ${formatResource(p.resource, p.borrowed)} borrowed` : '') +
    (lent > 0 ? `, ${formatResource(p.resource, lent)} lent to the cohort` : '') +
    (idle - lent > 0 ? `, ${formatResource(p.resource, lendable - lent)} unused and lendable` : '');
  return (
    <div className="usage" data-testid={p.testId}>
      <div className="usage-label">
        <span>{p.label}</span>
        <span className="muted small">{text}</span>
      </div>
      <div className="usage-bar" role="img" aria-label={`${p.label}: ${text}`}>
        <span className="u-used" style={{ width: pct(withinNominal) }} />
        <span className="u-borrowed" style={{ width: pct(p.borrowed) }} />
        <span className="u-lent" style={{ width: pct(lent) }} />
        <span className="u-idle" style={{ width: pct(idle - lent) }} />
        {p.nominal > 0 && <span className="u-nominal" style={{ left: pct(p.nominal) }} />}
      </div>
    </div>
  );
}

export function UsageLegend() {
  return (
    <p className="legend small" aria-hidden="true">
      <span className="swatch u-used" /> used within nominal <span className="swatch u-borrowed" /> borrowed from the
      cohort <span className="swatch u-lent" /> lent to the cohort <span className="swatch u-idle" /> unused nominal
      (lendable) <span className="swatch-line" /> nominal quota
    </p>
  );
}
