// Formatting and parsing of the API's units: money in integer micros, proto durations, times,
// bytes, CPU millicores. Pure functions (unit-tested in format.test.ts).
import type { Money } from '../gen/trainyard/v1/common';

const SYMBOLS: Record<string, string> = { USD: '$', EUR: '€', GBP: '£', JPY: '¥' };

function groupThousands(digits: string): string {
  return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/**
 * Formats integer micros (a decimal string, as int64 comes in JSON) with `decimals` digits,
 * rounding half away from zero, exactly (BigInt, never floating point).
 */
export function formatMicros(micros: string | number | bigint | undefined, decimals = 2): string {
  let v: bigint;
  try {
    v = BigInt(micros ?? 0);
  } catch {
    return '—';
  }
  const neg = v < 0n;
  if (neg) v = -v;
  const scale = 10n ** BigInt(6 - decimals);
  let q = v / scale;
  if ((v % scale) * 2n >= scale) q += 1n;
  const unit = 10n ** BigInt(decimals);
  const whole = groupThousands((q / unit).toString());
  const frac = decimals > 0 ? '.' + (q % unit).toString().padStart(decimals, '0') : '';
  const isZero = q === 0n;
  return `${neg && !isZero ? '-' : ''}${whole}${frac}`;
}

/** "$1,234.57", "1,234.57 CHF"; an absent Money is zero (proto3 JSON omits defaults). */
export function formatMoney(m: Money | undefined, decimals = 2, fallbackCurrency = ''): string {
  const code = m?.currencyCode || fallbackCurrency;
  const amount = formatMicros(m?.micros ?? '0', decimals);
  const sym = SYMBOLS[code];
  if (sym) return amount.startsWith('-') ? `-${sym}${amount.slice(1)}` : `${sym}${amount}`;
  return code ? `${amount} ${code}` : amount;
}

/** Micros as a JS number of currency units, for charts only (never for sums shown as text). */
export function microsToUnits(micros: string | number | undefined): number {
  if (micros === undefined || micros === '') return 0;
  return Number(micros) / 1e6;
}

/** Adds micros exactly. */
export function addMicros(...values: (string | undefined)[]): string {
  return values.reduce<bigint>((acc, v) => acc + BigInt(v || '0'), 0n).toString();
}

/** Parses a proto3 JSON Duration ("1.5s", "-3s", "0.000000001s") into seconds. */
export function parseProtoDuration(d: string | undefined): number | undefined {
  if (d === undefined || d === '') return undefined;
  const m = /^(-?\d+(?:\.\d{1,9})?)s$/.exec(d.trim());
  if (!m || m[1] === undefined) return undefined;
  return Number(m[1]);
}

/** Seconds as a proto3 JSON Duration: 5400 -> "5400s", 1.5 -> "1.5s". */
export function toProtoDuration(seconds: number): string {
  const fixed = seconds.toFixed(9).replace(/\.?0+$/, '');
  return `${fixed}s`;
}

const UNIT_SECONDS: Record<string, number> = { d: 86400, h: 3600, m: 60, s: 1, ms: 0.001 };

/**
 * Parses the job YAML's friendly durations: "90s", "10m", "1h30m", "2d", "1.5h", a plain
 * number of seconds, or a proto duration "5400s". Returns undefined when it is not one.
 */
export function parseHumanDuration(text: string | number | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (typeof text === 'number') return Number.isFinite(text) && text >= 0 ? text : undefined;
  const t = text.trim().toLowerCase();
  if (t === '') return undefined;
  if (/^\d+(\.\d+)?$/.test(t)) return Number(t);
  const re = /(\d+(?:\.\d+)?)(ms|d|h|m|s)/g;
  let total = 0;
  let consumed = 0;
  for (const m of t.matchAll(re)) {
    if (m.index !== consumed) return undefined;
    total += Number(m[1]) * (UNIT_SECONDS[m[2] ?? ''] ?? 0);
    consumed += m[0].length;
  }
  return consumed === t.length && consumed > 0 ? total : undefined;
}

/** Seconds in the job YAML's friendly form: 5400 -> "1h30m", 90 -> "1m30s", 0 -> "0s". */
export function formatHumanDuration(seconds: number | undefined): string {
  if (seconds === undefined || !Number.isFinite(seconds)) return '';
  if (seconds === 0) return '0s';
  const neg = seconds < 0;
  let s = Math.abs(seconds);
  const parts: string[] = [];
  for (const [unit, size] of [
    ['d', 86400],
    ['h', 3600],
    ['m', 60],
  ] as const) {
    const n = Math.floor(s / size);
    if (n > 0) {
      parts.push(`${n}${unit}`);
      s -= n * size;
    }
  }
  if (s > 0) {
    const rounded = Math.round(s * 1000) / 1000;
    parts.push(`${rounded}s`);
  }
  return (neg ? '-' : '') + parts.join('');
}

/** Long form for people: 5400 -> "1 h 30 min"; keeps the two largest units. */
export function formatElapsed(seconds: number | undefined): string {
  if (seconds === undefined || !Number.isFinite(seconds)) return '—';
  let s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  const units: [string, number][] = [
    ['d', 86400],
    ['h', 3600],
    ['min', 60],
    ['s', 1],
  ];
  const parts: string[] = [];
  for (const [name, size] of units) {
    const n = Math.floor(s / size);
    if (n > 0 || parts.length > 0) {
      if (n > 0) parts.push(`${n} ${name}`);
      s -= n * size;
      if (parts.length === 2) break;
    }
  }
  return parts.join(' ');
}

/** "2026-11-28 03:42:05 UTC" (times are UTC everywhere in Trainyard). */
export function formatTime(ts: string | undefined): string {
  if (!ts) return '—';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return ts;
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC').replace(/Z$/, ' UTC');
}

/** "3 min ago", "in 2 h" relative to now. */
export function formatRelative(ts: string | undefined, now: number = Date.now()): string {
  if (!ts) return '';
  const t = new Date(ts).getTime();
  if (Number.isNaN(t)) return '';
  const diff = (now - t) / 1000;
  const text = formatElapsed(Math.abs(diff));
  return diff >= 0 ? `${text} ago` : `in ${text}`;
}

/** Seconds between two RFC 3339 times (end defaults to now). */
export function secondsBetween(start: string | undefined, end?: string, now = Date.now()): number | undefined {
  if (!start) return undefined;
  const a = new Date(start).getTime();
  const b = end ? new Date(end).getTime() : now;
  if (Number.isNaN(a) || Number.isNaN(b)) return undefined;
  return (b - a) / 1000;
}

const BYTE_UNITS: Record<string, number> = {
  '': 1,
  k: 1e3,
  m: 1e6,
  g: 1e9,
  t: 1e12,
  ki: 1024,
  mi: 1024 ** 2,
  gi: 1024 ** 3,
  ti: 1024 ** 4,
};

/** "64Gi", "512Mi", "1T", "1000" -> bytes (integer); undefined when invalid. */
export function parseBytes(text: string | number | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (typeof text === 'number') return Number.isInteger(text) && text >= 0 ? text : undefined;
  const m = /^(\d+(?:\.\d+)?)\s*([kKmMgGtT]i?)?[bB]?$/.exec(text.trim());
  if (!m) return undefined;
  const unit = BYTE_UNITS[(m[2] ?? '').toLowerCase()];
  if (unit === undefined) return undefined;
  return Math.round(Number(m[1]) * unit);
}

/** Bytes as "64Gi" when whole in a binary unit, else "1.5 GiB"-style. */
export function formatBytes(bytes: string | number | undefined): string {
  const b = Number(bytes ?? 0);
  if (!Number.isFinite(b) || b <= 0) return '0';
  for (const [unit, size] of [
    ['Ti', 1024 ** 4],
    ['Gi', 1024 ** 3],
    ['Mi', 1024 ** 2],
    ['Ki', 1024],
  ] as const) {
    if (b >= size) {
      const v = b / size;
      return Number.isInteger(v) ? `${v}${unit}` : `${v.toFixed(1)}${unit}`;
    }
  }
  return `${b}`;
}

/** "8", "0.5", "500m" cores -> millicores; undefined when invalid. */
export function parseCpuMillis(text: string | number | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (typeof text === 'number') return text >= 0 ? Math.round(text * 1000) : undefined;
  const t = text.trim();
  const m = /^(\d+)m$/.exec(t);
  if (m) return Number(m[1]);
  if (/^\d+(\.\d+)?$/.test(t)) return Math.round(Number(t) * 1000);
  return undefined;
}

/** Millicores as cores: 8000 -> "8", 500 -> "0.5". */
export function formatCpu(millis: string | number | undefined): string {
  const m = Number(millis ?? 0);
  return String(m / 1000);
}

/** Strips an enum prefix for display: "JOB_STATE_RUNNING" -> "Running". */
export function enumLabel(value: string | undefined, prefix: string): string {
  if (!value) return '—';
  const rest = value.startsWith(prefix) ? value.slice(prefix.length) : value;
  const words = rest.toLowerCase().split('_').filter(Boolean);
  if (words.length === 0) return '—';
  const s = words.join(' ');
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** Last path segment of a resource name: "tenants/acme/jobs/42" -> "42". */
export function lastSegment(name: string | undefined): string {
  if (!name) return '';
  const i = name.lastIndexOf('/');
  return i >= 0 ? name.slice(i + 1) : name;
}

/** Decimal GPU-hours string -> short display, "12.5" -> "12.50". */
export function formatGpuHours(hours: string | undefined): string {
  if (!hours) return '0.00';
  const n = Number(hours);
  return Number.isFinite(n) ? n.toFixed(2) : hours;
}

/** A chart axis's money label: compact ("1.2K USD") from one unit up, two significant digits
 *  below it ("0.013 USD"), so that small amounts (lost work of a few cents) do not all read 0. */
export function formatAxisMoney(units: number, currency = ''): string {
  const suffix = currency ? ` ${currency}` : '';
  if (units === 0) return `0${suffix}`;
  const f =
    Math.abs(units) >= 1
      ? new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 1 })
      : new Intl.NumberFormat('en-US', { maximumSignificantDigits: 2 });
  return `${f.format(units)}${suffix}`;
}
