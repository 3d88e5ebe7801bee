// The attempts of a job as phases on one time axis (queued -> admitted -> running -> ended ...).
import type { Job } from '../gen/trainyard/v1/job';

export type Phase = 'queued' | 'admitted' | 'running';
export interface Segment {
  attempt: number;
  phase: Phase;
  start: number;
  end: number;
  /** Still going (end is "now"). */
  open: boolean;
}

function t(ts: string | undefined): number | undefined {
  if (!ts) return undefined;
  const v = new Date(ts).getTime();
  return Number.isNaN(v) ? undefined : v;
}

/**
 * Segments in time order: the wait before each attempt's admission (from submission or the
 * previous attempt's end), the admitted-not-started time, and the run.
 */
export function timelineSegments(job: Job, now = Date.now()): { segments: Segment[]; start: number; end: number } {
  const segments: Segment[] = [];
  const created = t(job.createTime) ?? now;
  let cursor = created;
  const jobEnd = t(job.endTime);
  for (const a of job.attempts ?? []) {
    const idx = a.index ?? 0;
    const admit = t(a.admitTime);
    const start = t(a.startTime);
    const end = t(a.endTime);
    if (admit !== undefined && admit > cursor) {
      segments.push({ attempt: idx, phase: 'queued', start: cursor, end: admit, open: false });
    }
    const admittedFrom = admit ?? cursor;
    const runFrom = start ?? undefined;
    if (runFrom !== undefined && runFrom > admittedFrom) {
      segments.push({ attempt: idx, phase: 'admitted', start: admittedFrom, end: runFrom, open: false });
    } else if (runFrom === undefined) {
      const stop = end ?? now;
      segments.push({ attempt: idx, phase: 'admitted', start: admittedFrom, end: stop, open: end === undefined });
    }
    if (runFrom !== undefined) {
      const stop = end ?? now;
      segments.push({ attempt: idx, phase: 'running', start: runFrom, end: stop, open: end === undefined });
    }
    cursor = end ?? now;
  }
  const state = String(job.state ?? '');
  const waiting = ['JOB_STATE_QUEUED', 'JOB_STATE_HELD', 'JOB_STATE_RECOVERING'].includes(state);
  if (waiting && cursor < now && jobEnd === undefined) {
    segments.push({ attempt: (job.attempts?.length ?? 0) + 1, phase: 'queued', start: cursor, end: now, open: true });
  }
  const end = Math.max(jobEnd ?? 0, ...segments.map((s) => s.end), created + 1000);
  return { segments, start: created, end };
}
