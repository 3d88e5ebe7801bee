import { useEffect, useRef, useState } from 'react';
import { watchJobs } from '../api/client';
import { errorText } from '../api/errors';
import type { JobEvent } from '../gen/trainyard/v1/job';

export interface WatchStatus {
  state: 'off' | 'connecting' | 'live' | 'reconnecting' | 'stopped';
  error?: string;
}

/**
 * Follows the Watch stream while `enabled`; hands events over in batches (every 500 ms) so a
 * burst of events re-renders once.
 */
export function useWatch(
  params: { tenant: string; jobSet?: string; job?: string; queue?: string; fromStart?: boolean },
  enabled: boolean,
  onEvents: (events: JobEvent[]) => void,
): WatchStatus {
  const { tenant, jobSet, job, queue, fromStart } = params;
  const key = JSON.stringify([tenant, jobSet, job, queue, fromStart]);
  const [status, setStatus] = useState<WatchStatus & { key: string }>({ state: 'off', key: '' });
  const handler = useRef(onEvents);
  useEffect(() => {
    handler.current = onEvents;
  }, [onEvents]);

  useEffect(() => {
    if (!enabled || !tenant) return;
    let buffer: JobEvent[] = [];
    const timer = setInterval(() => {
      if (buffer.length) {
        const batch = buffer;
        buffer = [];
        handler.current(batch);
      }
    }, 500);
    const stop = watchJobs({
      tenant,
      jobSet: jobSet || undefined,
      job: job || undefined,
      queue: queue || undefined,
      fromStart,
      onEvent: (e) => buffer.push(e),
      onStatus: (s) => setStatus({ key, state: s.state, error: s.error ? errorText(s.error) : undefined }),
    });
    return () => {
      stop();
      clearInterval(timer);
    };
    // key stands for the parameters listed after it.
  }, [enabled, key, tenant, jobSet, job, queue, fromStart]);
  if (!enabled || !tenant) return { state: 'off' };
  if (status.key !== key) return { state: 'connecting' };
  return { state: status.state, error: status.error };
}

export function WatchIndicator({ status }: { status: WatchStatus }) {
  const text: Record<WatchStatus['state'], string> = {
    off: 'Live updates off',
    connecting: 'Connecting…',
    live: 'Live',
    reconnecting: 'Reconnecting…',
    stopped: 'Live updates stopped',
  };
  return (
    <span className={`live live-${status.state}`} role="status" aria-live="polite" title={status.error}>
      <span className="live-dot" aria-hidden="true" />
      {text[status.state]}
      {status.error && status.state !== 'live' ? `: ${status.error}` : ''}
    </span>
  );
}
