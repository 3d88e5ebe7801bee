// Applies Watch events to jobs already on screen (pure; unit-tested).
import type { Job, JobEvent } from '../gen/trainyard/v1/job';

/** The job after `e`, or the same object when the event does not change it. */
export function applyEvent(job: Job, e: JobEvent): Job {
  if (e.job !== job.name) return job;
  switch (e.type) {
    case 'JOB_EVENT_TYPE_SUBMITTED':
    case 'JOB_EVENT_TYPE_STATE_CHANGED':
      return {
        ...job,
        state: e.toState ?? job.state,
        stateReason: e.reason ?? '',
        stateMessage: e.message ?? '',
        updateTime: e.time ?? job.updateTime,
        attemptCount: Math.max(job.attemptCount ?? 0, e.attempt ?? 0) || undefined,
      };
    case 'JOB_EVENT_TYPE_COST_UPDATED':
      return e.cost ? { ...job, cost: { ...job.cost, ...e.cost } } : job;
    case 'JOB_EVENT_TYPE_CANCEL_REQUESTED':
      return { ...job, cancelRequested: true, updateTime: e.time ?? job.updateTime };
    default:
      return job;
  }
}

/** Applies events to a list; returns the same array when nothing changed. */
export function applyEvents(jobs: Job[], events: JobEvent[]): Job[] {
  let changed = false;
  const byName = new Map<string, JobEvent[]>();
  for (const e of events) {
    if (!e.job) continue;
    const list = byName.get(e.job);
    if (list) list.push(e);
    else byName.set(e.job, [e]);
  }
  const out = jobs.map((j) => {
    const evs = j.name ? byName.get(j.name) : undefined;
    if (!evs) return j;
    let next = j;
    for (const e of evs) next = applyEvent(next, e);
    if (next !== j) changed = true;
    return next;
  });
  return changed ? out : jobs;
}

/** Events of jobs not in `known` that announce a new job (for the "N new jobs" banner). */
export function newJobNames(known: Set<string>, events: JobEvent[]): string[] {
  return events
    .filter((e) => e.type === 'JOB_EVENT_TYPE_SUBMITTED' && e.job && !known.has(e.job))
    .map((e) => e.job as string);
}
