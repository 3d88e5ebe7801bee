// Query strings of the REST gateway: repeated fields repeat the key, maps as key[k]=v, nested
// fields with dots (pass "report.parent" as the key). Unset and empty values are left out.
export type QueryValue =
  | string
  | number
  | boolean
  | undefined
  | null
  | readonly string[]
  | Readonly<Record<string, string>>;

export function buildQuery(params: Record<string, QueryValue>): string {
  const q = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === undefined || value === null || value === '' || value === false) continue;
    if (Array.isArray(value)) {
      for (const v of value as readonly string[]) if (v !== '') q.append(key, v);
    } else if (typeof value === 'object') {
      for (const [k, v] of Object.entries(value as Record<string, string>)) {
        if (k !== '') q.append(`${key}[${k}]`, v);
      }
    } else {
      q.append(key, String(value));
    }
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

/** Encodes each segment of a resource name for a URL path, keeping its slashes. */
export function namePath(name: string): string {
  return name
    .split('/')
    .map((seg) => encodeURIComponent(seg))
    .join('/');
}
