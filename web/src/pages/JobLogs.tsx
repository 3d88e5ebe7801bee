import { useEffect, useLayoutEffect, useRef, useState } from 'react';
import { getJobLogs } from '../api/client';
import { appendLogs, type LogView } from '../lib/logTail';
import { Empty, ErrorBox, Loading } from '../components/States';

/** How often a live attempt's output is asked for (the dispatcher copies it every few seconds). */
const POLL_MS = 3000;

export interface JobLogsPanelProps {
  /** "tenants/{tenant}/jobs/{job}". */
  name: string;
  /** The job's attempt indexes, oldest first. */
  attempts: number[];
}

/**
 * The Logs card of the job page: one attempt's output (the newest by default) as the dispatcher
 * copied it, followed every few seconds until the attempt ends. Output is text: React escapes
 * it, nothing in it is interpreted.
 */
export function JobLogsPanel({ name, attempts }: JobLogsPanelProps) {
  // 0: the newest attempt (and the next one when it starts).
  const [chosen, setChosen] = useState(0);
  const newest = attempts.at(-1) ?? 0;
  // What is shown belongs to this request; a new one starts from nothing.
  const key = `${name}#${chosen}#${chosen === 0 ? newest : chosen}`;
  const [shown, setShown] = useState<{ key: string; view?: LogView; error?: unknown }>({ key });

  useEffect(() => {
    const ctrl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    let current: LogView | undefined;
    const tick = async () => {
      try {
        const piece = await getJobLogs(name, current?.attempt || chosen, current?.endOffset ?? '0', ctrl.signal);
        current = appendLogs(current, piece);
        setShown({ key, view: current });
      } catch (e) {
        if (ctrl.signal.aborted) return;
        setShown({ key, view: current, error: e });
      }
      // Until the attempt's output is complete; a job without an attempt yet is asked again
      // when it has one (the key changes).
      if (!ctrl.signal.aborted && current && current.attempt > 0 && !current.complete) {
        timer = setTimeout(() => void tick(), POLL_MS);
      }
    };
    void tick();
    return () => {
      ctrl.abort();
      if (timer) clearTimeout(timer);
    };
  }, [name, chosen, key]);
  const view = shown.key === key ? shown.view : undefined;
  const error = shown.key === key ? shown.error : undefined;

  // Keep the newest line in sight while the reader is at the bottom.
  const pre = useRef<HTMLPreElement>(null);
  const atBottom = useRef(true);
  useLayoutEffect(() => {
    const el = pre.current;
    if (el && atBottom.current) el.scrollTop = el.scrollHeight;
  }, [view?.text]);
  const onScroll = () => {
    const el = pre.current;
    if (el) atBottom.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
  };

  return (
    <section className="card" aria-labelledby="logs-h">
      <h2 id="logs-h">Logs</h2>
      {attempts.length > 1 && (
        <label className="inline-field">
          <span>Attempt</span>
          <select
            value={chosen}
            onChange={(e) => setChosen(Number(e.target.value))}
            data-testid="logs-attempt"
          >
            <option value={0}>newest ({newest})</option>
            {attempts.map((i) => (
              <option key={i} value={i}>
                {i}
              </option>
            ))}
          </select>
        </label>
      )}
      {error != null && <ErrorBox error={error} title="Could not load the logs" />}
      {!view ? (
        error == null && <Loading label="Loading logs…" />
      ) : view.text === '' ? (
        <Empty>
          {view.reason ||
            (view.complete ? `Attempt ${view.attempt} wrote no output.` : `No output from attempt ${view.attempt} yet.`)}
        </Empty>
      ) : (
        <>
          <p className="muted small" data-testid="logs-status">
            Attempt {view.attempt} · <span className="mono">{view.backendJobName}</span> ·{' '}
            {Number(view.endOffset).toLocaleString('en-US')} bytes · {view.complete ? 'complete' : 'live, refreshed every few seconds'}
            {view.startOffset !== '0' || view.trimmed ? ' · only the newest output is kept' : ''}
          </p>
          <pre
            className="code logs"
            data-testid="job-logs"
            tabIndex={0}
            aria-label={`Output of attempt ${view.attempt}`}
            ref={pre}
            onScroll={onScroll}
          >
            {view.text}
          </pre>
          {view.reason && <p className="muted small">{view.reason}</p>}
        </>
      )}
    </section>
  );
}
