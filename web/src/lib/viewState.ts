// The jobs page's view (filters, sort, columns, grouping) <-> the URL query string, so a view
// can be bookmarked and shared. Defaults are left out of the URL.
export const ALL_COLUMNS = [
  'name',
  'displayName',
  'state',
  'queue',
  'project',
  'jobSet',
  'creator',
  'priority',
  'gpus',
  'attempts',
  'createTime',
  'updateTime',
  'cost',
  'reason',
] as const;
export type ColumnId = (typeof ALL_COLUMNS)[number];

export const DEFAULT_COLUMNS: readonly ColumnId[] = [
  'name',
  'displayName',
  'state',
  'queue',
  'project',
  'creator',
  'gpus',
  'createTime',
  'cost',
];

export type GroupBy = '' | 'queue' | 'jobSet' | 'state' | 'project';
const GROUPS: readonly GroupBy[] = ['', 'queue', 'jobSet', 'state', 'project'];

export interface SortSpec {
  id: ColumnId;
  desc: boolean;
}

export interface JobsView {
  queue: string;
  project: string;
  states: string[];
  user: string;
  jobSet: string;
  labels: Record<string, string>;
  createdAfter: string;
  createdBefore: string;
  sort: SortSpec;
  columns: ColumnId[];
  groupBy: GroupBy;
  pageSize: number;
}

export const DEFAULT_SORT: SortSpec = { id: 'createTime', desc: true };
export const PAGE_SIZES = [50, 100, 250, 500, 1000] as const;

export function defaultView(): JobsView {
  return {
    queue: '',
    project: '',
    states: [],
    user: '',
    jobSet: '',
    labels: {},
    createdAfter: '',
    createdBefore: '',
    sort: { ...DEFAULT_SORT },
    columns: [...DEFAULT_COLUMNS],
    groupBy: '',
    pageSize: 100,
  };
}

function isColumn(s: string): s is ColumnId {
  return (ALL_COLUMNS as readonly string[]).includes(s);
}

export function parseView(q: URLSearchParams): JobsView {
  const v = defaultView();
  v.queue = q.get('queue') ?? '';
  v.project = q.get('project') ?? '';
  v.user = q.get('user') ?? '';
  v.jobSet = q.get('jobSet') ?? '';
  v.createdAfter = q.get('after') ?? '';
  v.createdBefore = q.get('before') ?? '';
  v.states = q.getAll('state').filter((s) => /^JOB_STATE_[A-Z_]+$/.test(s));
  for (const l of q.getAll('label')) {
    const i = l.indexOf('=');
    if (i > 0) v.labels[l.slice(0, i)] = l.slice(i + 1);
  }
  const sort = q.get('sort');
  if (sort) {
    const desc = sort.startsWith('-');
    const id = desc ? sort.slice(1) : sort;
    if (isColumn(id)) v.sort = { id, desc };
  }
  const cols = q.get('cols');
  if (cols !== null) {
    const list = cols.split(',').filter(isColumn);
    if (list.length > 0) v.columns = [...new Set(list)];
  }
  const group = q.get('group') ?? '';
  if ((GROUPS as readonly string[]).includes(group)) v.groupBy = group as GroupBy;
  const size = Number(q.get('size'));
  if ((PAGE_SIZES as readonly number[]).includes(size)) v.pageSize = size;
  return v;
}

export function serializeView(v: JobsView): URLSearchParams {
  const q = new URLSearchParams();
  if (v.queue) q.set('queue', v.queue);
  if (v.project) q.set('project', v.project);
  for (const s of v.states) q.append('state', s);
  if (v.user) q.set('user', v.user);
  if (v.jobSet) q.set('jobSet', v.jobSet);
  for (const [k, val] of Object.entries(v.labels).sort(([a], [b]) => a.localeCompare(b))) {
    q.append('label', `${k}=${val}`);
  }
  if (v.createdAfter) q.set('after', v.createdAfter);
  if (v.createdBefore) q.set('before', v.createdBefore);
  if (v.sort.id !== DEFAULT_SORT.id || v.sort.desc !== DEFAULT_SORT.desc) {
    q.set('sort', `${v.sort.desc ? '-' : ''}${v.sort.id}`);
  }
  const sameCols =
    v.columns.length === DEFAULT_COLUMNS.length && v.columns.every((c, i) => c === DEFAULT_COLUMNS[i]);
  if (!sameCols) q.set('cols', v.columns.join(','));
  if (v.groupBy) q.set('group', v.groupBy);
  if (v.pageSize !== 100) q.set('size', String(v.pageSize));
  return q;
}

/** Columns the server can order by (the "create_time desc" style of ListJobsRequest.order_by). */
const SERVER_ORDER: Partial<Record<ColumnId, string>> = {
  createTime: 'create_time',
  updateTime: 'update_time',
};

/** The order_by sent to the server for a sort; undefined = the server's default (newest first). */
export function serverOrderBy(sort: SortSpec): string | undefined {
  const field = SERVER_ORDER[sort.id];
  if (!field) return undefined;
  if (field === 'create_time' && sort.desc) return undefined; // the default order
  return `${field} ${sort.desc ? 'desc' : 'asc'}`;
}

/** "labels" text box <-> map: "team=vision, env=prod". */
export function parseLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of text.split(/[,\n]/)) {
    const t = part.trim();
    if (!t) continue;
    const i = t.indexOf('=');
    if (i > 0) out[t.slice(0, i).trim()] = t.slice(i + 1).trim();
  }
  return out;
}
export function formatLabels(labels: Record<string, string> | undefined): string {
  return Object.entries(labels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
}

/**
 * A datetime-local input value ("2026-11-28T03:42", read as UTC) -> RFC 3339, or "" when empty
 * or invalid.
 */
export function localInputToRfc3339(value: string): string {
  if (!value) return '';
  const withSeconds = /T\d\d:\d\d$/.test(value) ? `${value}:00` : value;
  const d = new Date(`${withSeconds}Z`);
  return Number.isNaN(d.getTime()) ? '' : d.toISOString().replace('.000Z', 'Z');
}
