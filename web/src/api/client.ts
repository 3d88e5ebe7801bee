// The REST/JSON client of the gateway: bearer token from sessionStorage (never in a URL, never
// logged), JSON in and out, errors as ApiError.
import { ApiError, parseErrorBody } from './errors';
import { buildQuery, namePath, type QueryValue } from './query';
import { SseParser, backoffMs, compareSequence } from './sse';
import type {
  Job,
  ListJobsResponse,
  SubmitJobResponse,
  ExplainPendingResponse,
  JobLogs,
  ListCheckpointsResponse,
  WatchJobsResponse,
  JobEvent,
} from '../gen/trainyard/v1/job';
import type { Caller } from '../gen/trainyard/v1/admin';
import type {
  ListTenantsResponse,
  ListQueuesResponse,
  QueueStatus,
  ListCohortsResponse,
  ListPriorityClassesResponse,
  ListProjectsResponse,
} from '../gen/trainyard/v1/queue';
import type {
  ListClustersResponse,
  ListPoolsResponse,
  ListNodesResponse,
  ListFlavorsResponse,
  CapacitySummary,
} from '../gen/trainyard/v1/cluster';
import type {
  Report,
  ListBudgetsResponse,
  Invoice,
  PriceBook,
  GetReportRequest,
} from '../gen/trainyard/v1/accounting';

const TOKEN_KEY = 'trainyard.token';

export function getToken(): string | null {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}
export function setToken(token: string): void {
  sessionStorage.setItem(TOKEN_KEY, token);
}
export function clearToken(): void {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // storage unavailable
  }
}

/** Called when any request answers 401, so the app can go back to sign-in. */
let onUnauthenticated: (() => void) | undefined;
export function setUnauthenticatedHandler(fn: (() => void) | undefined): void {
  onUnauthenticated = fn;
}

interface RequestOptions {
  method?: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  query?: Record<string, QueryValue>;
  body?: unknown;
  signal?: AbortSignal;
  token?: string;
}

async function send(path: string, opts: RequestOptions = {}): Promise<Response> {
  const token = opts.token ?? getToken();
  const headers: Record<string, string> = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch(`/v1/${path}${buildQuery(opts.query ?? {})}`, {
      method: opts.method ?? 'GET',
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      signal: opts.signal,
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch (e) {
    if (e instanceof DOMException && e.name === 'AbortError') throw e;
    throw new ApiError(0, { status: 'UNAVAILABLE', message: 'The gateway cannot be reached.' });
  }
  if (!res.ok) {
    const err = new ApiError(res.status, parseErrorBody(await res.text().catch(() => '')));
    if (err.unauthenticated && !opts.token) onUnauthenticated?.();
    throw err;
  }
  return res;
}

export async function request<T>(path: string, opts: RequestOptions = {}): Promise<T> {
  const res = await send(path, opts);
  const text = await res.text();
  return (text ? JSON.parse(text) : {}) as T;
}

// --- Admin ---
export const whoami = (token?: string) => request<Caller>('whoami', { token });

// --- Tenants, queues, cohorts ---
export const listTenants = () => request<ListTenantsResponse>('tenants', { query: { pageSize: 1000 } });
export const listProjects = (tenant: string) =>
  request<ListProjectsResponse>(`tenants/${encodeURIComponent(tenant)}/projects`, {
    query: { pageSize: 1000 },
  });
export const listQueues = (tenant: string) =>
  request<ListQueuesResponse>(`tenants/${encodeURIComponent(tenant)}/queues`, {
    query: { pageSize: 1000 },
  });
export const getQueueStatus = (queueName: string) =>
  request<QueueStatus>(`${namePath(queueName)}:status`);
export const listCohorts = () => request<ListCohortsResponse>('cohorts', { query: { pageSize: 1000 } });
export const listPriorityClasses = () =>
  request<ListPriorityClassesResponse>('priorityClasses', { query: { pageSize: 1000 } });

// --- Jobs ---
export interface ListJobsParams {
  tenant: string;
  project?: string;
  queue?: string;
  states?: string[];
  labels?: Record<string, string>;
  jobSet?: string;
  user?: string;
  createdAfter?: string;
  createdBefore?: string;
  orderBy?: string;
  pageSize?: number;
  pageToken?: string;
  view?: 'JOB_VIEW_BASIC' | 'JOB_VIEW_FULL';
}

export function listJobsQuery(p: ListJobsParams): Record<string, QueryValue> {
  return {
    project: p.project,
    queue: p.queue,
    states: p.states,
    labels: p.labels,
    jobSet: p.jobSet,
    user: p.user,
    createdAfter: p.createdAfter,
    createdBefore: p.createdBefore,
    orderBy: p.orderBy,
    pageSize: p.pageSize,
    pageToken: p.pageToken,
    view: p.view,
  };
}

export const listJobs = (p: ListJobsParams, signal?: AbortSignal) =>
  request<ListJobsResponse>(`tenants/${encodeURIComponent(p.tenant)}/jobs`, {
    query: listJobsQuery(p),
    signal,
  });
export const getJob = (name: string) =>
  request<Job>(namePath(name), { query: { view: 'JOB_VIEW_FULL' } });
export const explainPending = (name: string) =>
  request<ExplainPendingResponse>(`${namePath(name)}:explain`);
export const listCheckpoints = (name: string) =>
  request<ListCheckpointsResponse>(`${namePath(name)}/checkpoints`, { query: { pageSize: 100 } });
/** An attempt's output (0: the newest attempt) from byte `offset` on. */
export const getJobLogs = (name: string, attempt: number, offset: string, signal?: AbortSignal) =>
  request<JobLogs>(`${namePath(name)}/logs`, { query: { attempt, offset }, signal });
export type JobAction = 'cancel' | 'hold' | 'release';
export const jobAction = (name: string, action: JobAction, reason: string) =>
  request<Job>(`${namePath(name)}:${action}`, { method: 'POST', body: { reason } });
export const submitJob = (tenant: string, job: Job, clientRequestId: string) =>
  request<SubmitJobResponse>(`tenants/${encodeURIComponent(tenant)}/jobs`, {
    method: 'POST',
    body: { job, clientRequestId },
  });

// --- Clusters ---
export const listClusters = () => request<ListClustersResponse>('clusters', { query: { pageSize: 1000 } });
export const listPools = () => request<ListPoolsResponse>('clusters/-/pools', { query: { pageSize: 1000 } });
export async function listAllNodes(): Promise<ListNodesResponse> {
  const nodes: NonNullable<ListNodesResponse['nodes']> = [];
  let pageToken: string | undefined;
  for (let i = 0; i < 50; i++) {
    const page = await request<ListNodesResponse>('clusters/-/nodes', {
      query: { pageSize: 1000, pageToken },
    });
    nodes.push(...(page.nodes ?? []));
    pageToken = page.nextPageToken;
    if (!pageToken) break;
  }
  return { nodes };
}
export const listFlavors = () => request<ListFlavorsResponse>('flavors', { query: { pageSize: 1000 } });
export const getCapacity = () => request<CapacitySummary>('capacity');

// --- Accounting ---
export function reportQuery(r: GetReportRequest, prefix = ''): Record<string, QueryValue> {
  const p = (k: string) => `${prefix}${k}`;
  return {
    [p('startTime')]: r.startTime,
    [p('endTime')]: r.endTime,
    [p('groupBy')]: r.groupBy as string[] | undefined,
    [p('project')]: r.project,
    [p('queue')]: r.queue,
    [p('timeZone')]: r.timeZone,
    [p('step')]: r.step,
    [p('user')]: r.user,
    [p('includeIdle')]: r.includeIdle,
  };
}
export const getReport = (tenant: string, r: GetReportRequest) =>
  request<Report>(`tenants/${encodeURIComponent(tenant)}/report`, { query: reportQuery(r) });
export const listBudgets = (tenant: string) =>
  request<ListBudgetsResponse>(`tenants/${encodeURIComponent(tenant)}/budgets`, {
    query: { pageSize: 1000 },
  });
export const getInvoice = (tenant: string, month: string) =>
  request<Invoice>(`tenants/${encodeURIComponent(tenant)}/invoices/${encodeURIComponent(month)}`);
export const getPriceBook = () => request<PriceBook>('priceBook');

/** ExportReport answers the file's raw bytes; returns them as a Blob. */
export async function exportReport(
  tenant: string,
  report: GetReportRequest,
  format: 'REPORT_FORMAT_CSV' | 'REPORT_FORMAT_JSON',
): Promise<Blob> {
  const res = await send(`tenants/${encodeURIComponent(tenant)}/report:export`, {
    method: 'POST',
    body: { report: { ...report, parent: `tenants/${tenant}` }, format },
  });
  return res.blob();
}

// --- Watch ---
export interface WatchOptions {
  tenant: string;
  jobSet?: string;
  job?: string;
  queue?: string;
  fromStart?: boolean;
  onEvent: (e: JobEvent) => void;
  /** Connection state for the UI: live, reconnecting (with the error), or stopped for good. */
  onStatus?: (s: { state: 'live' | 'reconnecting' | 'stopped'; error?: unknown }) => void;
}

/**
 * Follows GET /v1/tenants/{t}/jobs:watch (text/event-stream) with fetch(), reconnecting with
 * backoff and `Last-Event-ID` so that no event is missed or repeated. Returns a stop function.
 */
export function watchJobs(opts: WatchOptions): () => void {
  const controller = new AbortController();
  let lastId = '';
  let failures = 0;
  let stopped = false;

  const run = async () => {
    while (!stopped) {
      try {
        const token = getToken();
        const headers: Record<string, string> = { Accept: 'text/event-stream' };
        if (token) headers.Authorization = `Bearer ${token}`;
        if (lastId) headers['Last-Event-ID'] = lastId;
        const q = buildQuery({
          jobSet: opts.jobSet,
          job: opts.job,
          queue: opts.queue,
          fromStart: lastId ? undefined : opts.fromStart,
        });
        const res = await fetch(`/v1/tenants/${encodeURIComponent(opts.tenant)}/jobs:watch${q}`, {
          headers,
          signal: controller.signal,
          cache: 'no-store',
          credentials: 'omit',
        });
        if (!res.ok || !res.body) {
          const err = new ApiError(res.status, parseErrorBody(await res.text().catch(() => '')));
          if (!err.retryable) {
            if (err.unauthenticated) onUnauthenticated?.();
            throw Object.assign(err, { fatal: true });
          }
          throw err;
        }
        opts.onStatus?.({ state: 'live' });
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        const parser = new SseParser();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          for (const ev of parser.push(value)) {
            if (ev.event === 'error') {
              const body = parseErrorBody(ev.data);
              const err = new ApiError(body?.code ?? 500, body);
              throw err.retryable ? err : Object.assign(err, { fatal: true });
            }
            if (ev.event !== 'message' || !ev.data) continue;
            const msg = JSON.parse(ev.data) as WatchJobsResponse;
            const seq = ev.id || msg.event?.sequence || '';
            // Never deliver an event twice (a replay after reconnecting).
            if (seq && lastId && compareSequence(seq, lastId) <= 0) continue;
            if (seq) lastId = seq;
            failures = 0;
            if (msg.event) opts.onEvent(msg.event);
          }
        }
        parser.end();
        throw new ApiError(503, { message: 'The event stream ended.' });
      } catch (e) {
        if (stopped || (e instanceof DOMException && e.name === 'AbortError')) return;
        if ((e as { fatal?: boolean }).fatal) {
          opts.onStatus?.({ state: 'stopped', error: e });
          return;
        }
        opts.onStatus?.({ state: 'reconnecting', error: e });
        const delay = backoffMs(failures++);
        await new Promise<void>((r) => setTimeout(r, delay));
      }
    }
  };
  void run();
  return () => {
    stopped = true;
    controller.abort();
  };
}
