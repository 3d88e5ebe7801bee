// The gateway's error body: {"error":{"code":400,"status":"INVALID_ARGUMENT","message":"...",
// "field":"job.spec.workers","reason":"OUT_OF_RANGE","retryDelay":"3s"}}.
export interface ApiErrorBody {
  code?: number;
  status?: string;
  message?: string;
  field?: string;
  reason?: string;
  retryDelay?: string;
}

export class ApiError extends Error {
  readonly httpStatus: number;
  readonly status: string;
  readonly field: string;
  readonly reason: string;
  readonly retryDelay: string;

  constructor(httpStatus: number, body: ApiErrorBody | undefined, fallback = '') {
    super(body?.message || fallback || `HTTP ${httpStatus}`);
    this.name = 'ApiError';
    this.httpStatus = httpStatus;
    this.status = body?.status ?? statusFromHttp(httpStatus);
    this.field = body?.field ?? '';
    this.reason = body?.reason ?? '';
    this.retryDelay = body?.retryDelay ?? '';
  }

  get unauthenticated(): boolean {
    return this.httpStatus === 401 || this.status === 'UNAUTHENTICATED';
  }
  get permissionDenied(): boolean {
    return this.httpStatus === 403 || this.status === 'PERMISSION_DENIED';
  }
  get notFound(): boolean {
    return this.httpStatus === 404 || this.status === 'NOT_FOUND';
  }
  get retryable(): boolean {
    return (
      this.httpStatus === 429 ||
      this.httpStatus >= 500 ||
      this.status === 'UNAVAILABLE' ||
      this.status === 'RESOURCE_EXHAUSTED' ||
      this.status === 'DEADLINE_EXCEEDED'
    );
  }
}

function statusFromHttp(code: number): string {
  switch (code) {
    case 400:
      return 'INVALID_ARGUMENT';
    case 401:
      return 'UNAUTHENTICATED';
    case 403:
      return 'PERMISSION_DENIED';
    case 404:
      return 'NOT_FOUND';
    case 409:
      return 'ABORTED';
    case 429:
      return 'RESOURCE_EXHAUSTED';
    case 501:
      return 'UNIMPLEMENTED';
    case 503:
      return 'UNAVAILABLE';
    default:
      return code >= 500 ? 'INTERNAL' : 'UNKNOWN';
  }
}

/** Parses an error response body (JSON or not). */
export function parseErrorBody(text: string): ApiErrorBody | undefined {
  try {
    const v = JSON.parse(text) as { error?: ApiErrorBody } | ApiErrorBody;
    if (v && typeof v === 'object') {
      if ('error' in v && v.error && typeof v.error === 'object') return v.error;
      if ('message' in v) return v as ApiErrorBody;
    }
  } catch {
    // not JSON
  }
  const trimmed = text.trim();
  return trimmed ? { message: trimmed.slice(0, 500) } : undefined;
}

/** Human text of any error for the UI. */
export function errorText(e: unknown): string {
  if (e instanceof ApiError) return `${e.status}: ${e.message}`;
  if (e instanceof Error) return e.message;
  return String(e);
}
