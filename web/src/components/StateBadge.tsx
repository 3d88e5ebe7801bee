import { enumLabel } from '../lib/format';

const TONE: Record<string, string> = {
  JOB_STATE_QUEUED: 'pending',
  JOB_STATE_HELD: 'warn',
  JOB_STATE_ADMITTED: 'active',
  JOB_STATE_DISPATCHING: 'active',
  JOB_STATE_RUNNING: 'running',
  JOB_STATE_SUCCEEDED: 'ok',
  JOB_STATE_FAILED: 'bad',
  JOB_STATE_CANCELLED: 'muted',
  JOB_STATE_PREEMPTING: 'warn',
  JOB_STATE_RECOVERING: 'warn',
};

export function StateBadge({ state }: { state: string | undefined }) {
  const s = state ?? 'JOB_STATE_UNSPECIFIED';
  return <span className={`badge badge-${TONE[s] ?? 'muted'}`}>{enumLabel(s, 'JOB_STATE_')}</span>;
}

export function Badge({ tone, children }: { tone: string; children: React.ReactNode }) {
  return <span className={`badge badge-${tone}`}>{children}</span>;
}

export const PENDING_STATES = ['JOB_STATE_QUEUED', 'JOB_STATE_HELD'];
export const TERMINAL_STATES = ['JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED'];
export const ALL_STATES = [
  'JOB_STATE_QUEUED',
  'JOB_STATE_HELD',
  'JOB_STATE_ADMITTED',
  'JOB_STATE_DISPATCHING',
  'JOB_STATE_RUNNING',
  'JOB_STATE_PREEMPTING',
  'JOB_STATE_RECOVERING',
  'JOB_STATE_SUCCEEDED',
  'JOB_STATE_FAILED',
  'JOB_STATE_CANCELLED',
];
