import { describe, expect, it } from 'vitest';
import { applyEvent, applyEvents, newJobNames } from './jobEvents';
import type { Job, JobEvent } from '../gen/trainyard/v1/job';

const job: Job = { name: 'tenants/a/jobs/1', state: 'JOB_STATE_QUEUED' as never, stateReason: 'SUBMITTED' };

describe('applying Watch events', () => {
  it('moves the state and reason', () => {
    const e: JobEvent = {
      type: 'JOB_EVENT_TYPE_STATE_CHANGED' as never,
      job: 'tenants/a/jobs/1',
      fromState: 'JOB_STATE_QUEUED' as never,
      toState: 'JOB_STATE_RUNNING' as never,
      reason: 'STARTED',
      attempt: 1,
      time: '2026-11-28T00:00:00Z',
    };
    expect(applyEvent(job, e)).toEqual({
      name: 'tenants/a/jobs/1',
      state: 'JOB_STATE_RUNNING',
      stateReason: 'STARTED',
      stateMessage: '',
      updateTime: '2026-11-28T00:00:00Z',
      attemptCount: 1,
    });
  });
  it('takes the cost of COST_UPDATED and ignores other jobs', () => {
    const e: JobEvent = {
      type: 'JOB_EVENT_TYPE_COST_UPDATED' as never,
      job: 'tenants/a/jobs/1',
      cost: { spent: { currencyCode: 'USD', micros: '5000000' } },
    };
    expect(applyEvent(job, e).cost?.spent?.micros).toBe('5000000');
    expect(applyEvent(job, { ...e, job: 'tenants/a/jobs/2' })).toBe(job);
  });
  it('keeps the same list when nothing changes, and finds new jobs', () => {
    const list = [job];
    expect(applyEvents(list, [{ type: 'JOB_EVENT_TYPE_CHECKPOINT_REPORTED' as never, job: job.name }])).toBe(list);
    expect(
      newJobNames(new Set([job.name as string]), [
        { type: 'JOB_EVENT_TYPE_SUBMITTED' as never, job: 'tenants/a/jobs/2' },
        { type: 'JOB_EVENT_TYPE_SUBMITTED' as never, job: 'tenants/a/jobs/1' },
      ]),
    ).toEqual(['tenants/a/jobs/2']);
  });
});
