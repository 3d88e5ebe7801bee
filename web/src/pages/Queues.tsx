import { useState } from 'react';
import { Link, useParams } from 'react-router';
import { useQueries, useQuery } from '@tanstack/react-query';
import { explainPending, getQueueStatus, listCohorts, listJobs, listQueues } from '../api/client';
import type { Cohort, Queue, QueueStatus } from '../gen/trainyard/v1/queue';
import { useSession } from '../session';
import { capabilities } from '../lib/roles';
import { enumLabel, formatHumanDuration, lastSegment, parseProtoDuration } from '../lib/format';
import { explainReason } from '../lib/explain';
import { Empty, ErrorBox, Loading } from '../components/States';
import { Badge } from '../components/StateBadge';
import { UsageBar, UsageLegend, formatResource } from '../components/UsageBar';
import { tenantLabel } from '../components/Layout';

function queueTenant(name: string | undefined) {
  return name?.split('/')[1] ?? '';
}

export function QueuesPage() {
  const { tenant = '' } = useParams();
  const s = useSession();
  const caps = capabilities(s.caller, tenant);
  const queuesQ = useQuery({ queryKey: ['queues', tenant], queryFn: () => listQueues(tenant), enabled: caps.readJobs });
  const cohortsQ = useQuery({ queryKey: ['cohorts'], queryFn: listCohorts, staleTime: 60_000, retry: false });
  const queues = queuesQ.data?.queues ?? [];
  const statuses = useQueries({
    queries: queues.map((q) => ({
      queryKey: ['queueStatus', q.name],
      queryFn: () => getQueueStatus(q.name as string),
      refetchInterval: 10_000,
    })),
  });
  const statusOf = new Map<string, QueueStatus>();
  queues.forEach((q, i) => {
    const d = statuses[i]?.data;
    if (q.name && d) statusOf.set(q.name, d);
  });

  if (!caps.readJobs) return <Empty>Your roles in {tenantLabel(tenant)} do not include reading queues.</Empty>;

  const byCohort = new Map<string, Queue[]>();
  for (const q of queues) {
    const c = q.cohort ?? '';
    byCohort.set(c, [...(byCohort.get(c) ?? []), q]);
  }
  const cohorts = cohortsQ.data?.cohorts ?? [];

  return (
    <>
      <div className="page-head">
        <h1>Queues and cohorts</h1>
        <span className="muted small">Usage refreshes every 10 s.</span>
      </div>
      <UsageLegend />
      {queuesQ.isPending ? (
        <Loading label="Loading queues…" />
      ) : queuesQ.error ? (
        <ErrorBox error={queuesQ.error} retry={() => void queuesQ.refetch()} />
      ) : queues.length === 0 ? (
        <Empty>No queues in {tenantLabel(tenant)}. A platform admin creates them (yard apply).</Empty>
      ) : (
        [...byCohort.entries()]
          .sort(([a], [b]) => a.localeCompare(b))
          .map(([cohort, qs]) => (
            <section key={cohort || '(none)'} className="cohort" aria-labelledby={`cohort-${cohort}`}>
              <h2 id={`cohort-${cohort}`}>{cohort ? `Cohort ${cohort}` : 'Queues without a cohort'}</h2>
              {cohort && (
                <CohortSummary
                  cohort={cohorts.find((c) => lastSegment(c.name) === cohort)}
                  queues={qs}
                  statusOf={statusOf}
                />
              )}
              <div className="queue-grid">
                {qs.map((q, i) => (
                  <QueueCard
                    key={q.name}
                    queue={q}
                    status={statusOf.get(q.name ?? '')}
                    statusError={statuses[queues.indexOf(q)]?.error ?? null}
                    showTenant={tenant === '-'}
                    index={i}
                  />
                ))}
              </div>
            </section>
          ))
      )}
      {cohortsQ.error ? null : cohorts.length > 0 && (
        <section aria-labelledby="all-cohorts">
          <h2 id="all-cohorts">All cohorts</h2>
          <table className="grid">
            <thead>
              <tr>
                <th>Cohort</th>
                <th>Parent</th>
                <th>Weight</th>
                <th>Own quota</th>
              </tr>
            </thead>
            <tbody>
              {cohorts.map((c) => (
                <tr key={c.name}>
                  <td>{lastSegment(c.name)}</td>
                  <td>{c.parent || '(root)'}</td>
                  <td>{c.fairShareWeight ?? 1}</td>
                  <td className="small">
                    {(c.quotas ?? [])
                      .flatMap((fq) =>
                        (fq.resources ?? []).map(
                          (r) => `${fq.flavor}: ${formatResource(r.resource, Number(r.nominal ?? 0))}`,
                        ),
                      )
                      .join(', ') || '—'}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      )}
    </>
  );
}

function CohortSummary({
  cohort,
  queues,
  statusOf,
}: {
  cohort: Cohort | undefined;
  queues: Queue[];
  statusOf: Map<string, QueueStatus>;
}) {
  // Sum of the members' GPU usage per flavor, as the caller can see them.
  const per = new Map<string, { used: number; nominal: number; borrowed: number }>();
  for (const q of queues) {
    for (const u of statusOf.get(q.name ?? '')?.usage ?? []) {
      if (u.resource !== 'RESOURCE_NAME_GPU') continue;
      const key = u.flavor ?? '';
      const cur = per.get(key) ?? { used: 0, nominal: 0, borrowed: 0 };
      cur.used += Number(u.used ?? 0);
      cur.nominal += Number(u.nominal ?? 0);
      cur.borrowed += Number(u.borrowed ?? 0);
      per.set(key, cur);
    }
  }
  for (const fq of cohort?.quotas ?? []) {
    for (const r of fq.resources ?? []) {
      if (r.resource !== 'RESOURCE_NAME_GPU') continue;
      const cur = per.get(fq.flavor ?? '') ?? { used: 0, nominal: 0, borrowed: 0 };
      cur.nominal += Number(r.nominal ?? 0);
      per.set(fq.flavor ?? '', cur);
    }
  }
  if (per.size === 0) return null;
  return (
    <div className="card cohort-summary">
      <h3>
        GPUs of the cohort{cohort?.parent ? ` (inside ${cohort.parent})` : ''}, over the queues you can see
      </h3>
      {[...per.entries()].map(([flavor, u]) => (
        <UsageBar
          key={flavor}
          label={flavor}
          resource="RESOURCE_NAME_GPU"
          used={u.used}
          nominal={u.nominal}
          borrowed={0}
          testId={`cohort-bar-${lastSegment(cohort?.name)}-${flavor}`}
        />
      ))}
      <p className="small muted">
        Borrowed across the cohort: {[...per.values()].reduce((a, u) => a + u.borrowed, 0)} GPUs (served first by the
        cohort&apos;s own quota, then lent by the members with unused nominal quota, each bar showing its part).
      </p>
    </div>
  );
}

function QueueCard({
  queue,
  status,
  statusError,
  showTenant,
}: {
  queue: Queue;
  status: QueueStatus | undefined;
  statusError: unknown;
  showTenant: boolean;
  index: number;
}) {
  const id = lastSegment(queue.name);
  const t = queueTenant(queue.name);
  const jobs = status?.jobsByState ?? {};
  const count = (k: string) => Number(jobs[k] ?? jobs[k.replace('JOB_STATE_', '')] ?? 0);
  const pending = count('JOB_STATE_QUEUED') + count('JOB_STATE_HELD');
  const running = count('JOB_STATE_RUNNING') + count('JOB_STATE_ADMITTED') + count('JOB_STATE_DISPATCHING');
  const stopped = queue.stopPolicy === 'STOP_POLICY_HOLD' || queue.stopPolicy === 'STOP_POLICY_HOLD_AND_DRAIN';
  const limits = new Map<string, number | undefined>();
  for (const fq of queue.quotas ?? [])
    for (const r of fq.resources ?? [])
      limits.set(`${fq.flavor}/${r.resource}`, r.lendingLimit === undefined ? undefined : Number(r.lendingLimit));

  return (
    <article className="card queue-card" id={`queue-${id}`} data-testid={`queue-${id}`} aria-labelledby={`qh-${t}-${id}`}>
      <h3 id={`qh-${t}-${id}`}>
        {showTenant ? `${t}/` : ''}
        {id} {stopped && <Badge tone="bad">{enumLabel(queue.stopPolicy, 'STOP_POLICY_')}</Badge>}
      </h3>
      <p className="small muted">
        {enumLabel(queue.queueingStrategy ?? 'QUEUEING_STRATEGY_BEST_EFFORT_FIFO', 'QUEUEING_STRATEGY_')} · weight{' '}
        {queue.fairShareWeight ?? 1}
        {queue.minRuntime ? ` · min runtime ${formatHumanDuration(parseProtoDuration(queue.minRuntime))}` : ''}
      </p>
      {statusError ? (
        <ErrorBox error={statusError} title="No live status" />
      ) : !status ? (
        <Loading label="Loading usage…" />
      ) : (
        <>
          <dl className="kv-inline">
            <div>
              <dt>Pending</dt>
              <dd data-testid={`queue-${id}-pending`}>
                <Link to={`/t/${encodeURIComponent(t)}/jobs?queue=${encodeURIComponent(id)}&state=JOB_STATE_QUEUED&state=JOB_STATE_HELD`}>
                  {pending}
                </Link>
              </dd>
            </div>
            <div>
              <dt>Running</dt>
              <dd>{running}</dd>
            </div>
            <div>
              <dt>Fair share</dt>
              <dd title="Usage above nominal ÷ what the cohort can lend, ÷ weight (0 within nominal)">
                {(status.weightedShare ?? 0).toFixed(3)}
              </dd>
            </div>
          </dl>
          {(status.usage ?? []).length === 0 ? (
            <p className="muted small">No quota.</p>
          ) : (
            (status.usage ?? []).map((u) => (
              <UsageBar
                key={`${u.flavor}-${u.resource}`}
                label={`${u.flavor} ${enumLabel(u.resource, 'RESOURCE_NAME_').toUpperCase()}`}
                resource={u.resource}
                used={Number(u.used ?? 0)}
                nominal={Number(u.nominal ?? 0)}
                borrowed={Number(u.borrowed ?? 0)}
                lent={Number(u.lent ?? 0)}
                lendingLimit={limits.get(`${u.flavor}/${u.resource}`)}
                testId={`queue-bar-${id}-${u.flavor}-${lastSegment(u.resource)}`}
              />
            ))
          )}
          {pending > 0 && <HeadOfQueue tenant={t} queue={id} />}
        </>
      )}
    </article>
  );
}

/** Why the first pending job of the queue (in scheduling order) is not running; asked on demand. */
function HeadOfQueue({ tenant, queue }: { tenant: string; queue: string }) {
  const [open, setOpen] = useState(false);
  const headQ = useQuery({
    queryKey: ['queueHead', tenant, queue],
    enabled: open,
    queryFn: async () => {
      const page = await listJobs({ tenant, queue, states: ['JOB_STATE_QUEUED'], pageSize: 200 });
      const jobs = [...(page.jobs ?? [])];
      if (jobs.length === 0) return null;
      // Ask the scheduler about the few likeliest heads (highest priority, oldest) and keep the
      // one it puts first.
      jobs.sort(
        (a, b) => (b.priority ?? 0) - (a.priority ?? 0) || String(a.createTime).localeCompare(String(b.createTime)),
      );
      const candidates = jobs.slice(0, 3);
      const explained = await Promise.all(candidates.map((j) => explainPending(j.name as string)));
      let best = 0;
      explained.forEach((e, i) => {
        const p = Number(e.positionInQueue ?? 0);
        const bp = Number(explained[best]?.positionInQueue ?? 0);
        if (p > 0 && (bp === 0 || p < bp)) best = i;
      });
      return { job: candidates[best], explain: explained[best] };
    },
  });
  return (
    <details className="head" onToggle={(e) => setOpen((e.target as HTMLDetailsElement).open)}>
      <summary data-testid={`queue-${queue}-why`}>Why is the head of the queue not running?</summary>
      {!open ? null : headQ.isPending ? (
        <Loading label="Asking the scheduler…" />
      ) : headQ.error ? (
        <ErrorBox error={headQ.error} />
      ) : !headQ.data ? (
        <p>No queued job (the pending ones are held).</p>
      ) : (
        <div>
          <p>
            Job{' '}
            <Link to={`/t/${encodeURIComponent(tenant)}/jobs/${lastSegment(headQ.data.job?.name)}`}>
              {headQ.data.job?.displayName || lastSegment(headQ.data.job?.name)}
            </Link>
            {headQ.data.explain?.positionInQueue ? ` (position ${headQ.data.explain.positionInQueue} of ${headQ.data.explain.queueLength})` : ''}:{' '}
            <Badge tone="pending">{headQ.data.explain?.reason || 'UNKNOWN'}</Badge>
          </p>
          {explainReason(headQ.data.explain?.reason) && <p className="small">{explainReason(headQ.data.explain?.reason)}</p>}
          {headQ.data.explain?.message && <p className="mono small">{headQ.data.explain.message}</p>}
        </div>
      )}
    </details>
  );
}
