// Plain words for the scheduler's pending reasons (docs/scheduling.md, "Decisions and reason
// codes") and for how attempts end.
const PENDING: Record<string, string> = {
  QUOTA_EXHAUSTED:
    'Its queue has used its quota for this kind of GPU, and the cohort has nothing left to lend. It starts when running jobs in the queue (or borrowers in the cohort) finish.',
  NO_CAPACITY:
    'The queue has quota, but no free nodes can hold the whole gang right now. It starts when enough nodes free up.',
  NO_FIT_TOPOLOGY:
    'The job asks for all workers in one rack or block (or one cluster), and no such unit is large enough or free enough.',
  BLOCKED_BY_STRICT_FIFO:
    'The queue is strict first-in-first-out, and a job ahead of it is still waiting, so it waits too.',
  NO_ELIGIBLE_FLAVOR:
    'The queue has no quota on any flavor the job’s spot policy allows. Change the spot policy or ask for quota.',
  WAITING_FOR_RESERVATION:
    'Capacity is being kept free for it: it starts when the running jobs there reach their time limits (backfill reservation).',
  BUDGET_HOLD:
    'A budget of the tenant or project has too little left for what this job is expected to cost, or a user’s hourly spending cap is reached.',
  QUEUE_STOPPED: 'Its queue is stopped by an administrator: it admits no new work until restarted.',
  AWAITING_SCHEDULER: 'The scheduler has not looked at the job yet; this normally takes about a second.',
  HELD: 'The job is held (by a user, an administrator or a budget) and is not considered until it is released.',
  NOT_PENDING: 'The job is not waiting: it is running or has ended.',
  INVALID_SNAPSHOT: 'The scheduler refused its view of the platform for this cycle; it will try again.',
};

/** A sentence a person can read about a pending reason code. */
export function explainReason(reason: string | undefined): string {
  if (!reason) return '';
  const code = reason.split(':')[0]?.trim() ?? '';
  return PENDING[code] ?? '';
}

const FAILURE: Record<string, string> = {
  FAILURE_CLASS_USER_ERROR: 'the job’s own code failed (non-zero exit or out of memory)',
  FAILURE_CLASS_PREEMPTION: 'Trainyard preempted it for other work',
  FAILURE_CLASS_SPOT_RECLAIM: 'the provider reclaimed the spot capacity',
  FAILURE_CLASS_NODE_FAILURE: 'a node under it failed',
  FAILURE_CLASS_TIME_LIMIT: 'it reached its time limit',
  FAILURE_CLASS_CANCELLED: 'it was cancelled',
  FAILURE_CLASS_BACKEND_ERROR: 'the cluster rejected or lost it',
};

export function explainFailure(fc: string | undefined): string {
  return fc ? (FAILURE[fc] ?? '') : '';
}

/** Whether an attempt ended for a platform reason (does not count against retries). */
export function platformCaused(fc: string | undefined): boolean {
  return (
    fc === 'FAILURE_CLASS_PREEMPTION' || fc === 'FAILURE_CLASS_SPOT_RECLAIM' || fc === 'FAILURE_CLASS_NODE_FAILURE'
  );
}
