import { jobAction, type JobAction } from '../api/client';
import { errorText } from '../api/errors';
import type { Job } from '../gen/trainyard/v1/job';
import { TERMINAL_STATES } from './StateBadge';

/** Whether an action applies to a job in its state (the server refuses the others). */
export function actionApplies(action: JobAction, job: Job): boolean {
  const s = String(job.state ?? '');
  if (action === 'cancel') return !TERMINAL_STATES.includes(s) && !job.cancelRequested;
  if (action === 'hold') return s === 'JOB_STATE_QUEUED';
  return s === 'JOB_STATE_HELD';
}

export interface BulkResult {
  ok: number;
  failed: { name: string; error: string }[];
}

/** Runs an action over jobs, 8 at a time. */
export async function runBulk(action: JobAction, names: string[], reason: string): Promise<BulkResult> {
  const result: BulkResult = { ok: 0, failed: [] };
  let i = 0;
  const worker = async () => {
    while (i < names.length) {
      const name = names[i++] as string;
      try {
        await jobAction(name, action, reason);
        result.ok++;
      } catch (e) {
        result.failed.push({ name, error: errorText(e) });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(8, names.length) }, worker));
  return result;
}

export const ACTION_LABEL: Record<JobAction, string> = { cancel: 'Cancel', hold: 'Hold', release: 'Release' };
