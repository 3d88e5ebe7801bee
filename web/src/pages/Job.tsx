import { useCallback, useMemo, useState } from 'react';
import { Link, useParams } from 'react-router';
import { useQuery, useQueryClient } from '@tanstack/react-query';
import { explainPending, getJob, jobAction, listCheckpoints, type JobAction } from '../api/client';
import { errorText } from '../api/errors';
import type { Job, JobEvent } from '../gen/trainyard/v1/job';
import { useSession } from '../session';
import { capabilities } from '../lib/roles';
import {
  enumLabel,
  formatBytes,
  formatCpu,
  formatElapsed,
  formatGpuHours,
  formatHumanDuration,
  formatMoney,
  formatRelative,
  formatTime,
  lastSegment,
  parseProtoDuration,
  secondsBetween,
} from '../lib/format';
import { jobToYaml } from '../lib/jobYaml';
import { explainFailure, explainReason, platformCaused } from '../lib/explain';
import { timelineSegments } from '../lib/timeline';
import { StateBadge, PENDING_STATES, TERMINAL_STATES, Badge } from '../components/StateBadge';
import { Empty, ErrorBox, Loading } from '../components/States';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { WatchIndicator, useWatch } from '../components/useWatch';
import { ACTION_LABEL, actionApplies } from '../components/jobActions';
import { JobLogsPanel } from './JobLogs';

export function JobPage() {
  const { tenant = '', jobId = '' } = useParams();
  const name = `tenants/${tenant}/jobs/${jobId}`;
  const s = useSession();
  const caps = capabilities(s.caller, tenant);
  const qc = useQueryClient();
  const jobQ = useQuery({ queryKey: ['job', name], queryFn: () => getJob(name) });
  const job = jobQ.data;
  const pending = PENDING_STATES.includes(String(job?.state ?? ''));
  const explainQ = useQuery({
    queryKey: ['explain', name],
    queryFn: () => explainPending(name),
    enabled: !!job && !TERMINAL_STATES.includes(String(job.state ?? '')),
    refetchInterval: pending ? 10_000 : false,
  });
  const ckQ = useQuery({ queryKey: ['checkpoints', name], queryFn: () => listCheckpoints(name), enabled: !!job });

  const [events, setEvents] = useState<JobEvent[]>([]);
  const onEvents = useCallback(
    (batch: JobEvent[]) => {
      setEvents((prev) => [...prev, ...batch].slice(-500));
      void qc.invalidateQueries({ queryKey: ['job', name] });
      void qc.invalidateQueries({ queryKey: ['explain', name] });
      if (batch.some((e) => e.type === 'JOB_EVENT_TYPE_CHECKPOINT_REPORTED')) {
        void qc.invalidateQueries({ queryKey: ['checkpoints', name] });
      }
    },
    [qc, name],
  );
  const watch = useWatch({ tenant, job: name, fromStart: true }, !!job, onEvents);

  const [action, setAction] = useState<JobAction | null>(null);
  const [busy, setBusy] = useState(false);
  const [actionError, setActionError] = useState('');
  const doAction = async (reason: string) => {
    if (!action) return;
    setBusy(true);
    setActionError('');
    try {
      const j = await jobAction(name, action, reason);
      qc.setQueryData(['job', name], (old: Job | undefined) => ({ ...old, ...j }));
      void qc.invalidateQueries({ queryKey: ['jobs', tenant] });
    } catch (e) {
      setActionError(errorText(e));
    } finally {
      setBusy(false);
      setAction(null);
    }
  };

  if (jobQ.isPending) return <Loading label={`Loading job ${jobId}…`} />;
  if (jobQ.error || !job)
    return (
      <>
        <h1>Job {jobId}</h1>
        <ErrorBox error={jobQ.error} retry={() => void jobQ.refetch()} />
      </>
    );

  const spec = job.spec ?? {};
  const res = spec.resources ?? {};
  const jobsLink = `/t/${encodeURIComponent(tenant)}/jobs`;

  return (
    <>
      <nav aria-label="Breadcrumb" className="crumbs">
        <Link to={jobsLink}>Jobs</Link> / <span>{jobId}</span>
      </nav>
      <div className="page-head">
        <h1>
          <span data-testid="job-display-name">{job.displayName || `Job ${jobId}`}</span>{' '}
          <StateBadge state={job.state} />
          {job.cancelRequested && <Badge tone="warn">cancelling</Badge>}
        </h1>
        <div className="page-actions">
          <WatchIndicator status={watch} />
          {caps.mutateJobs &&
            (['cancel', 'hold', 'release'] as const).map((a) =>
              actionApplies(a, job) ? (
                <button
                  key={a}
                  type="button"
                  className={a === 'cancel' ? 'danger' : undefined}
                  onClick={() => setAction(a)}
                  data-testid={`job-${a}`}
                >
                  {ACTION_LABEL[a]}
                </button>
              ) : null,
            )}
          {caps.mutateJobs && (
            <Link
              className="button"
              to={`/t/${encodeURIComponent(tenant)}/submit?from=${encodeURIComponent(jobId)}`}
              data-testid="job-resubmit"
            >
              Resubmit a copy
            </Link>
          )}
        </div>
      </div>
      {actionError && (
        <div className="notice notice-warn" role="alert">
          {actionError}
        </div>
      )}
      {(job.stateReason || job.stateMessage) && (
        <p className="state-line">
          <span className="mono">{job.stateReason}</span>
          {job.stateMessage ? ` — ${job.stateMessage}` : ''}
        </p>
      )}

      <div className="cols">
        <section className="card" aria-labelledby="sum-h">
          <h2 id="sum-h">Summary</h2>
          <dl className="kv">
            <dt>Job</dt>
            <dd className="mono">{job.name}</dd>
            <dt>User</dt>
            <dd>{job.creator || '—'}</dd>
            <dt>Project / queue</dt>
            <dd>
              {spec.project || '—'} /{' '}
              <Link to={`/t/${encodeURIComponent(tenant)}/queues#queue-${spec.queue ?? ''}`}>{spec.queue || '—'}</Link>
            </dd>
            <dt>Priority</dt>
            <dd>
              {spec.priorityClass || 'default'} ({job.priority ?? 0})
            </dd>
            <dt>Gang</dt>
            <dd>
              {spec.workers ?? 1} worker{(spec.workers ?? 1) > 1 ? 's' : ''} × {res.gpus ?? 0} GPU
              {res.gpuModel ? ` ${res.gpuModel}` : ''}, {formatCpu(res.cpuMillis)} CPU, {formatBytes(res.memoryBytes)}{' '}
              memory
            </dd>
            <dt>Submitted</dt>
            <dd>
              {formatTime(job.createTime)} <span className="muted">({formatRelative(job.createTime)})</span>
            </dd>
            {job.endTime && (
              <>
                <dt>Ended</dt>
                <dd>
                  {formatTime(job.endTime)} (after {formatElapsed(secondsBetween(job.createTime, job.endTime))})
                </dd>
              </>
            )}
            <dt>Attempts</dt>
            <dd>{job.attemptCount ?? 0}</dd>
            {job.resumeFrom && (
              <>
                <dt>Next resume from</dt>
                <dd className="mono">{job.resumeFrom}</dd>
              </>
            )}
            {job.labels && Object.keys(job.labels).length > 0 && (
              <>
                <dt>Labels</dt>
                <dd>
                  {Object.entries(job.labels).map(([k, v]) => (
                    <span key={k} className="chip">
                      {k}={v}
                    </span>
                  ))}
                </dd>
              </>
            )}
          </dl>
        </section>

        <section className="card" aria-labelledby="why-h" data-testid="pending-explanation">
          <h2 id="why-h">{pending ? 'Why is it not running?' : 'Scheduling'}</h2>
          {TERMINAL_STATES.includes(String(job.state)) ? (
            <p>The job has ended: {enumLabel(job.state, 'JOB_STATE_').toLowerCase()}.</p>
          ) : explainQ.isPending ? (
            <Loading label="Asking the scheduler…" />
          ) : explainQ.error ? (
            <ErrorBox error={explainQ.error} title="No explanation" />
          ) : explainQ.data ? (
            <>
              {(explainQ.data.queueLength ?? '0') !== '0' && explainQ.data.positionInQueue && (
                <p className="big" data-testid="queue-position">
                  Position {explainQ.data.positionInQueue} of {explainQ.data.queueLength} in queue {spec.queue}
                </p>
              )}
              <p>
                <Badge tone={explainQ.data.reason === 'NOT_PENDING' ? 'ok' : 'pending'}>
                  {explainQ.data.reason || 'UNKNOWN'}
                </Badge>
              </p>
              {explainReason(explainQ.data.reason) && <p>{explainReason(explainQ.data.reason)}</p>}
              {explainQ.data.message && (
                <p>
                  The scheduler says: <span className="mono">{explainQ.data.message}</span>
                </p>
              )}
              {explainQ.data.evaluateTime && (
                <p className="muted small">Evaluated {formatRelative(explainQ.data.evaluateTime)}.</p>
              )}
            </>
          ) : null}
        </section>

        <section className="card" aria-labelledby="cost-h" data-testid="job-cost">
          <h2 id="cost-h">Cost</h2>
          {job.cost ? (
            <dl className="kv">
              <dt>Spent so far</dt>
              <dd className="big">
                {formatMoney(job.cost.spent)} {job.cost.final ? <Badge tone="ok">final</Badge> : <Badge tone="pending">accruing</Badge>}
              </dd>
              <dt>Charged to the tenant</dt>
              <dd>{formatMoney(job.cost.tenantCost, 2, job.cost.spent?.currencyCode)}</dd>
              <dt>Lost to interruptions</dt>
              <dd>{formatMoney(job.cost.lostWork, 2, job.cost.spent?.currencyCode)}</dd>
              <dt>GPU-hours</dt>
              <dd>{formatGpuHours(job.cost.gpuHours)}</dd>
              <dt>Estimate of the current attempt</dt>
              <dd>{job.cost.estimate ? formatMoney(job.cost.estimate) : 'not estimated yet'}</dd>
            </dl>
          ) : (
            <p className="muted">No cost metered for this job (no accounting service, or it has not run yet).</p>
          )}
        </section>
      </div>

      <section className="card" aria-labelledby="att-h">
        <h2 id="att-h">Attempts</h2>
        <AttemptTimeline job={job} />
        {(job.attempts ?? []).length === 0 ? (
          <Empty>No attempt has started yet.</Empty>
        ) : (
          <div className="table-wrap">
            <table className="grid" data-testid="attempts">
              <thead>
                <tr>
                  <th>#</th>
                  <th>Where</th>
                  <th>Admitted</th>
                  <th>Started</th>
                  <th>Ended</th>
                  <th>How it ended</th>
                  <th>Lost work</th>
                  <th>Estimate</th>
                </tr>
              </thead>
              <tbody>
                {(job.attempts ?? []).map((a) => (
                  <tr key={a.index}>
                    <td>{a.index}</td>
                    <td>
                      {lastSegment(a.cluster) || '—'} · {lastSegment(a.flavor) || '—'}
                      {a.placements && a.placements.length > 0 && (
                        <details>
                          <summary>{a.placements.length} node(s)</summary>
                          <ul className="plain">
                            {a.placements.map((p) => (
                              <li key={p.worker ?? 0} className="mono small">
                                worker {p.worker ?? 0}: {lastSegment(p.node)}
                              </li>
                            ))}
                          </ul>
                        </details>
                      )}
                      {a.backendJobName && (
                        <div className="muted small mono">
                          {a.backendJobName}
                          {a.backendJobId ? ` (${a.backendJobId})` : ''}
                        </div>
                      )}
                    </td>
                    <td>{formatTime(a.admitTime)}</td>
                    <td>{formatTime(a.startTime)}</td>
                    <td>{a.endTime ? formatTime(a.endTime) : 'running'}</td>
                    <td>
                      {a.failureClass ? (
                        <>
                          <Badge tone={platformCaused(a.failureClass) ? 'warn' : 'bad'}>
                            {enumLabel(a.failureClass, 'FAILURE_CLASS_')}
                          </Badge>{' '}
                          {explainFailure(a.failureClass)}
                          {platformCaused(a.failureClass) && ' (does not count against retries)'}
                        </>
                      ) : a.endTime ? (
                        'succeeded'
                      ) : (
                        '—'
                      )}
                      {a.exitCode ? <div className="small">exit code {a.exitCode}</div> : null}
                      {a.message && <div className="small">{a.message}</div>}
                      {a.resumedFrom && <div className="small mono">resumed from {a.resumedFrom}</div>}
                    </td>
                    <td>{a.lostGpuSeconds ? `${formatElapsed(Number(a.lostGpuSeconds))} GPU` : '—'}</td>
                    <td>{a.estimatedCost ? formatMoney(a.estimatedCost) : '—'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </section>

      <div className="cols">
        <section className="card" aria-labelledby="ck-h">
          <h2 id="ck-h">Checkpoints</h2>
          {ckQ.isPending ? (
            <Loading />
          ) : ckQ.error ? (
            <ErrorBox error={ckQ.error} />
          ) : (ckQ.data?.checkpoints ?? []).length === 0 ? (
            <Empty>
              No checkpoint reported.
              {spec.checkpoint?.resumable ? '' : ' The job is not marked resumable, so an interruption restarts it from the beginning.'}
            </Empty>
          ) : (
            <div className="table-wrap">
              <table className="grid" data-testid="checkpoints">
                <thead>
                  <tr>
                    <th>Step</th>
                    <th>Attempt</th>
                    <th>Written</th>
                    <th>Where</th>
                    <th>Metadata</th>
                  </tr>
                </thead>
                <tbody>
                  {(ckQ.data?.checkpoints ?? []).map((c) => (
                    <tr key={`${c.attempt}-${c.step}-${c.uri}`}>
                      <td>{c.step ?? '0'}</td>
                      <td>{c.attempt ?? 0}</td>
                      <td>{formatTime(c.time)}</td>
                      <td className="mono small">{c.uri}</td>
                      <td className="small">
                        {Object.entries(c.metadata ?? {})
                          .map(([k, v]) => `${k}=${v}`)
                          .join(', ')}
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </section>
        <JobLogsPanel name={name} attempts={(job.attempts ?? []).map((a) => a.index ?? 0)} />
      </div>

      <section className="card" aria-labelledby="ev-h">
        <h2 id="ev-h">Events</h2>
        {events.length === 0 ? (
          <Empty>{watch.state === 'live' ? 'No events retained for this job.' : 'Waiting for the event stream…'}</Empty>
        ) : (
          <ol className="events" data-testid="job-events" tabIndex={0} aria-labelledby="ev-h">
            {[...events].reverse().map((e) => (
              <li key={e.sequence}>
                <span className="muted small">{formatTime(e.time)}</span>{' '}
                <strong>{enumLabel(e.type, 'JOB_EVENT_TYPE_')}</strong>
                {e.toState && (
                  <>
                    {' '}
                    {e.fromState && e.fromState !== 'JOB_STATE_UNSPECIFIED' ? `${enumLabel(e.fromState, 'JOB_STATE_')} → ` : ''}
                    {enumLabel(e.toState, 'JOB_STATE_')}
                  </>
                )}
                {e.reason && <span className="mono"> {e.reason}</span>}
                {e.message && <span> — {e.message}</span>}
                {e.checkpoint && <span className="mono"> step {e.checkpoint.step}</span>}
                {e.cost && <span> {formatMoney(e.cost.spent)}</span>}
              </li>
            ))}
          </ol>
        )}
      </section>

      <section className="card" aria-labelledby="spec-h">
        <h2 id="spec-h">Spec</h2>
        <div className="cols">
          <dl className="kv">
            <dt>Image</dt>
            <dd className="mono">{spec.image || '—'}</dd>
            <dt>Command</dt>
            <dd className="mono">{(spec.command ?? []).join(' ') || '—'}</dd>
            <dt>Time limit</dt>
            <dd>{formatHumanDuration(parseProtoDuration(spec.timeLimit)) || '—'}</dd>
            <dt>Expected runtime</dt>
            <dd>{formatHumanDuration(parseProtoDuration(spec.expectedRuntime)) || '—'}</dd>
            <dt>Spot</dt>
            <dd>
              {!spec.spotPolicy || spec.spotPolicy === 'SPOT_POLICY_UNSPECIFIED'
                ? `default (${spec.checkpoint?.resumable ? 'allowed: the job is resumable' : 'never: the job is not resumable'})`
                : enumLabel(spec.spotPolicy, 'SPOT_POLICY_')}
            </dd>
            <dt>Checkpoints</dt>
            <dd>
              {spec.checkpoint?.resumable ? 'resumable' : 'not resumable'}
              {spec.checkpoint?.interval ? `, every ${formatHumanDuration(parseProtoDuration(spec.checkpoint.interval))}` : ''}
              {spec.checkpoint?.directory ? ` in ${spec.checkpoint.directory}` : ''}
            </dd>
            <dt>Job set</dt>
            <dd>{spec.jobSet || '—'}</dd>
          </dl>
          <div>
            <h3>As job YAML</h3>
            <pre className="code" data-testid="job-yaml" tabIndex={0}>
              {jobToYaml(job)}
            </pre>
          </div>
        </div>
      </section>

      <ConfirmDialog
        open={action !== null}
        title={action ? `${ACTION_LABEL[action]} job ${jobId}?` : ''}
        confirmLabel={action ? `${ACTION_LABEL[action]} 1 job` : ''}
        danger={action === 'cancel'}
        askReason
        busy={busy}
        onCancel={() => setAction(null)}
        onConfirm={(r) => void doAction(r)}
      />
    </>
  );
}

function AttemptTimeline({ job }: { job: Job }) {
  const { segments, start, end } = useMemo(() => timelineSegments(job), [job]);
  if (segments.length === 0) return null;
  const span = Math.max(1, end - start);
  return (
    <figure className="timeline" aria-label="Attempt timeline" data-testid="attempt-timeline">
      <div className="timeline-track">
        {segments.map((sg, i) => (
          <div
            key={i}
            className={`tl-seg tl-${sg.phase}${sg.open ? ' tl-open' : ''}`}
            style={{ left: `${((sg.start - start) / span) * 100}%`, width: `${Math.max(0.4, ((sg.end - sg.start) / span) * 100)}%` }}
            title={`attempt ${sg.attempt}: ${sg.phase} ${formatElapsed((sg.end - sg.start) / 1000)}`}
          />
        ))}
      </div>
      <figcaption>
        <ol className="plain timeline-list">
          {segments.map((sg, i) => (
            <li key={i}>
              <span className={`tl-key tl-${sg.phase}`} aria-hidden="true" /> attempt {sg.attempt} {sg.phase}{' '}
              {formatElapsed((sg.end - sg.start) / 1000)}
              {sg.open ? ' (so far)' : ''}
            </li>
          ))}
        </ol>
      </figcaption>
    </figure>
  );
}
