import { describe, expect, it } from 'vitest';
import { buildQuery, namePath } from './query';
import { listJobsQuery, reportQuery } from './client';
import { ApiError, parseErrorBody } from './errors';

describe('buildQuery', () => {
  it('repeats repeated fields, writes maps as key[k]=v and leaves defaults out', () => {
    expect(
      buildQuery({
        pageSize: 50,
        states: ['JOB_STATE_RUNNING', 'JOB_STATE_QUEUED'],
        labels: { team: 'vision' },
        queue: '',
        fromStart: false,
        project: undefined,
      }),
    ).toBe('?pageSize=50&states=JOB_STATE_RUNNING&states=JOB_STATE_QUEUED&labels%5Bteam%5D=vision');
    expect(buildQuery({})).toBe('');
  });
  it('sends the jobs filters, including the new user / time range / order_by', () => {
    const q = buildQuery(
      listJobsQuery({
        tenant: 'acme',
        queue: 'default',
        user: 'users/alice',
        createdAfter: '2026-11-01T00:00:00Z',
        orderBy: 'create_time asc',
        pageToken: 'abc',
      }),
    );
    const p = new URLSearchParams(q.slice(1));
    expect(p.get('queue')).toBe('default');
    expect(p.get('user')).toBe('users/alice');
    expect(p.get('createdAfter')).toBe('2026-11-01T00:00:00Z');
    expect(p.get('orderBy')).toBe('create_time asc');
    expect(p.get('pageToken')).toBe('abc');
  });
  it('writes report requests with dotted prefixes', () => {
    const q = reportQuery({ groupBy: ['REPORT_DIMENSION_PROJECT'] as never, step: 'REPORT_STEP_DAY' as never }, 'report.');
    expect(buildQuery(q)).toBe('?report.groupBy=REPORT_DIMENSION_PROJECT&report.step=REPORT_STEP_DAY');
  });
  it('encodes name segments but keeps slashes', () => {
    expect(namePath('tenants/a b/jobs/4')).toBe('tenants/a%20b/jobs/4');
  });
});

describe('errors', () => {
  it('reads the gateway error body', () => {
    const body = parseErrorBody(
      '{"error":{"code":400,"status":"INVALID_ARGUMENT","message":"job.spec.workers: must be between 1 and 4096","field":"job.spec.workers","reason":"OUT_OF_RANGE"}}',
    );
    const e = new ApiError(400, body);
    expect(e.status).toBe('INVALID_ARGUMENT');
    expect(e.field).toBe('job.spec.workers');
    expect(e.reason).toBe('OUT_OF_RANGE');
    expect(e.message).toMatch(/^job\.spec\.workers/);
    expect(e.retryable).toBe(false);
  });
  it('falls back on non-JSON bodies and HTTP codes', () => {
    const e = new ApiError(503, parseErrorBody('upstream down'));
    expect(e.status).toBe('UNAVAILABLE');
    expect(e.message).toBe('upstream down');
    expect(e.retryable).toBe(true);
    expect(new ApiError(401, undefined).unauthenticated).toBe(true);
  });
});
