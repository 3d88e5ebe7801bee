import { useCallback, useEffect, useMemo, useState } from 'react';
import { Link, useParams, useSearchParams } from 'react-router';
import { useInfiniteQuery, useQuery, useQueryClient, type InfiniteData } from '@tanstack/react-query';
import {
  getExpandedRowModel,
  getGroupedRowModel,
  getSortedRowModel,
  useReactTable,
  type ColumnDef,
  type RowSelectionState,
  type SortingState,
} from '@tanstack/react-table';
import { listJobs, listProjects, listQueues, type JobAction } from '../api/client';
import { ApiError } from '../api/errors';
import type { Job, JobEvent, ListJobsResponse } from '../gen/trainyard/v1/job';
import { useSession } from '../session';
import { capabilities } from '../lib/roles';
import { lastSegment } from '../lib/format';
import {
  ALL_COLUMNS,
  PAGE_SIZES,
  defaultView,
  formatLabels,
  localInputToRfc3339,
  parseLabels,
  parseView,
  serializeView,
  serverOrderBy,
  isServerSort,
  type ColumnId,
  type GroupBy,
  type JobsView,
} from '../lib/viewState';
import { applyEvents, newJobNames } from '../lib/jobEvents';
import { ALL_STATES } from '../components/StateBadge';
import { Empty, ErrorBox, Loading } from '../components/States';
import { ConfirmDialog } from '../components/ConfirmDialog';
import { WatchIndicator, useWatch } from '../components/useWatch';
import { ACTION_LABEL, actionApplies, runBulk, type BulkResult } from '../components/jobActions';
import { enumLabel } from '../lib/format';
import { tenantLabel } from '../components/Layout';
import { JobsGrid, totalGpus } from './JobsGrid';
import { getCachedCoreRowModel } from '../lib/cachedRowModel';

const cachedCoreRowModel = getCachedCoreRowModel<Job>();

const COLUMN_LABEL: Record<ColumnId, string> = {
  name: 'Job',
  displayName: 'Name',
  state: 'State',
  queue: 'Queue',
  project: 'Project',
  jobSet: 'Job set',
  creator: 'User',
  priority: 'Priority',
  gpus: 'GPUs',
  attempts: 'Attempts',
  createTime: 'Submitted',
  updateTime: 'Updated',
  cost: 'Cost',
  reason: 'Reason',
};

/** Fields the lead is adding to ListJobsRequest; an older gateway answers 400 naming them. */
const NEW_FILTER_FIELDS = /\b(user|created_after|created_before|createdAfter|createdBefore|order_by|orderBy)\b/;

export function JobsPage() {
  const { tenant = '' } = useParams();
  const s = useSession();
  const caps = capabilities(s.caller, tenant);
  const [search, setSearch] = useSearchParams();
  const view = useMemo(() => parseView(search), [search]);
  const setView = useCallback(
    (next: JobsView) => setSearch(serializeView(next), { replace: false }),
    [setSearch],
  );
  const qc = useQueryClient();

  const filterKey = {
    queue: view.queue,
    project: view.project,
    states: view.states,
    labels: view.labels,
    jobSet: view.jobSet,
    user: view.user,
    createdAfter: view.createdAfter,
    createdBefore: view.createdBefore,
    orderBy: serverOrderBy(view.sort),
    pageSize: view.pageSize,
  };
  const queryKey = ['jobs', tenant, filterKey];
  const jobsQ = useInfiniteQuery({
    queryKey,
    queryFn: ({ pageParam, signal }) =>
      listJobs(
        {
          tenant,
          ...filterKey,
          queue: filterKey.queue || undefined,
          states: filterKey.states.length ? filterKey.states : undefined,
          pageToken: pageParam || undefined,
        },
        signal,
      ),
    initialPageParam: '',
    getNextPageParam: (last: ListJobsResponse) => last.nextPageToken || undefined,
    enabled: caps.readJobs,
  });
  const jobs = useMemo(() => jobsQ.data?.pages.flatMap((p) => p.jobs ?? []) ?? [], [jobsQ.data]);

  // --- live updates ---
  const [live, setLive] = useState(true);
  const [newJobs, setNewJobs] = useState<string[]>([]);
  const onEvents = useCallback(
    (events: JobEvent[]) => {
      const known = new Set<string>();
      qc.setQueryData<InfiniteData<ListJobsResponse>>(queryKey, (data) => {
        if (!data) return data;
        let changed = false;
        const pages = data.pages.map((p) => {
          const before = p.jobs ?? [];
          for (const j of before) if (j.name) known.add(j.name);
          const after = applyEvents(before, events);
          if (after !== before) changed = true;
          return after === before ? p : { ...p, jobs: after };
        });
        return changed ? { ...data, pages } : data;
      });
      const fresh = newJobNames(known, events);
      if (fresh.length) setNewJobs((n) => [...new Set([...n, ...fresh])]);
    },
    // queryKey is rebuilt each render from the view; its JSON is the identity.
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [qc, JSON.stringify(queryKey)],
  );
  const watch = useWatch(
    { tenant, queue: view.queue, jobSet: view.jobSet },
    live && caps.readJobs && jobsQ.isSuccess,
    onEvents,
  );
  useEffect(() => setNewJobs([]), [tenant, search]);

  // --- table ---
  const [rowSelection, setRowSelection] = useState<RowSelectionState>({});
  useEffect(() => setRowSelection({}), [tenant, search]);
  // Table state objects keep their identity between renders: TanStack Table recomputes (and
  // auto-resets) its row models when they change.
  const sorting: SortingState = useMemo(() => [{ id: view.sort.id, desc: view.sort.desc }], [view.sort.id, view.sort.desc]);
  const grouping = useMemo(() => (view.groupBy ? [view.groupBy] : []), [view.groupBy]);
  const columnKey = view.columns.join(',');
  const columnVisibility = useMemo(
    () => Object.fromEntries(ALL_COLUMNS.map((c) => [c, columnKey.split(',').includes(c)])),
    [columnKey],
  );

  const columns = useMemo<ColumnDef<Job>[]>(
    () => [
      {
        id: 'select',
        enableSorting: false,
        enableGrouping: false,
        header: ({ table }) => (
          <input
            type="checkbox"
            aria-label="Select all loaded jobs"
            checked={table.getIsAllRowsSelected()}
            ref={(el) => {
              if (el) el.indeterminate = table.getIsSomeRowsSelected();
            }}
            onChange={table.getToggleAllRowsSelectedHandler()}
            data-testid="select-all"
          />
        ),
      },
      {
        id: 'name',
        accessorFn: (j) => Number(lastSegment(j.name)) || lastSegment(j.name),
        header: COLUMN_LABEL.name,
      },
      {
        id: 'displayName',
        accessorFn: (j) => j.displayName ?? '',
        header: COLUMN_LABEL.displayName,
      },
      {
        id: 'state',
        accessorFn: (j) => j.state ?? '',
        header: COLUMN_LABEL.state,
      },
      { id: 'queue', accessorFn: (j) => j.spec?.queue ?? '', header: COLUMN_LABEL.queue },
      { id: 'project', accessorFn: (j) => j.spec?.project ?? '', header: COLUMN_LABEL.project },
      { id: 'jobSet', accessorFn: (j) => j.spec?.jobSet ?? '', header: COLUMN_LABEL.jobSet },
      { id: 'creator', accessorFn: (j) => j.creator ?? '', header: COLUMN_LABEL.creator },
      { id: 'priority', accessorFn: (j) => j.priority ?? 0, header: COLUMN_LABEL.priority },
      {
        id: 'gpus',
        accessorFn: totalGpus,
        header: COLUMN_LABEL.gpus,
      },
      { id: 'attempts', accessorFn: (j) => j.attemptCount ?? 0, header: COLUMN_LABEL.attempts },
      {
        id: 'createTime',
        accessorFn: (j) => j.createTime ?? '',
        header: COLUMN_LABEL.createTime,
      },
      {
        id: 'updateTime',
        accessorFn: (j) => j.updateTime ?? '',
        header: COLUMN_LABEL.updateTime,
      },
      {
        id: 'cost',
        accessorFn: (j) => Number(j.cost?.spent?.micros ?? 0),
        header: COLUMN_LABEL.cost,
      },
      {
        id: 'reason',
        accessorFn: (j) => j.stateReason ?? '',
        header: COLUMN_LABEL.reason,
      },
    ],
    [],
  );

  const table = useReactTable({
    data: jobs,
    columns,
    state: {
      sorting,
      grouping,
      rowSelection,
      expanded: true,
      columnVisibility,
    },
    autoResetAll: false,
    // A click cycles a column between its two directions; it never drops the sort (which
    // would fall back to newest first, so "oldest first" could not be reached by clicking).
    enableSortingRemoval: false,
    // The server orders by what it can (create time, priority, name, state, queue); the
    // browser sorts only the loaded rows by the other columns.
    manualSorting: isServerSort(view.sort),
    getRowId: (j) => j.name ?? '',
    enableRowSelection: (row) => !row.getIsGrouped(),
    onRowSelectionChange: setRowSelection,
    onSortingChange: (updater) => {
      const next = typeof updater === 'function' ? updater(sorting) : updater;
      const first = next[0];
      setView({ ...view, sort: first ? { id: first.id as ColumnId, desc: first.desc } : defaultView().sort });
    },
    getCoreRowModel: cachedCoreRowModel,
    getSortedRowModel: getSortedRowModel(),
    getGroupedRowModel: getGroupedRowModel(),
    getExpandedRowModel: getExpandedRowModel(),
    groupedColumnMode: false,
  });
  const rows = table.getRowModel().rows;

  const { fetchNextPage, hasNextPage, isFetchingNextPage } = jobsQ;
  const fetchMore = useCallback(() => void fetchNextPage(), [fetchNextPage]);
  const sortKey = `${view.sort.id}:${view.sort.desc}`;

  // --- bulk actions ---
  const selected = jobs.filter((j) => j.name && rowSelection[j.name]);
  const [pending, setPending] = useState<JobAction | null>(null);
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<(BulkResult & { action: JobAction }) | null>(null);
  const eligible = pending ? selected.filter((j) => actionApplies(pending, j)) : [];
  const doBulk = async (reason: string) => {
    if (!pending) return;
    setBusy(true);
    const r = await runBulk(
      pending,
      eligible.map((j) => j.name as string),
      reason,
    );
    setBusy(false);
    setResult({ ...r, action: pending });
    setPending(null);
    setRowSelection({});
    void qc.invalidateQueries({ queryKey: ['jobs', tenant] });
  };

  if (!caps.readJobs) {
    return (
      <>
        <h1>Jobs</h1>
        <Empty>Your roles in {tenantLabel(tenant)} do not include reading jobs.</Empty>
      </>
    );
  }

  // A failed next page keeps the rows already loaded; only a failed first page replaces them.
  const err = jobsQ.isFetchNextPageError ? null : jobsQ.error;
  const nextPageError = jobsQ.isFetchNextPageError ? jobsQ.error : null;
  const unsupported =
    err instanceof ApiError &&
    err.status === 'INVALID_ARGUMENT' &&
    NEW_FILTER_FIELDS.test(`${err.field} ${err.message}`);

  return (
    <>
      <div className="page-head">
        <h1>Jobs {tenant === '-' ? 'in all tenants' : `in ${tenant}`}</h1>
        <div className="page-actions">
          <WatchIndicator status={watch} />
          <button type="button" onClick={() => setLive(!live)} aria-pressed={live} data-testid="live-toggle">
            {live ? 'Pause live updates' : 'Resume live updates'}
          </button>
          <button type="button" onClick={() => void jobsQ.refetch()} data-testid="refresh">
            Refresh
          </button>
        </div>
      </div>
      <JobFilters key={`${tenant}?${search.toString()}`} tenant={tenant} view={view} setView={setView} />
      <div className="toolbar" role="toolbar" aria-label="Table and selection">
        <label className="inline-field">
          <span>Group by</span>
          <select
            value={view.groupBy}
            onChange={(e) => setView({ ...view, groupBy: e.target.value as GroupBy })}
            data-testid="group-by"
          >
            <option value="">Nothing</option>
            <option value="queue">Queue</option>
            <option value="jobSet">Job set</option>
            <option value="state">State</option>
            <option value="project">Project</option>
          </select>
        </label>
        <details className="menu">
          <summary data-testid="columns-menu">Columns</summary>
          <fieldset className="menu-body">
            <legend className="sr-only">Visible columns</legend>
            {ALL_COLUMNS.map((c) => (
              <label key={c} className="check">
                <input
                  type="checkbox"
                  checked={view.columns.includes(c)}
                  onChange={(e) => {
                    const cols = e.target.checked
                      ? ALL_COLUMNS.filter((x) => x === c || view.columns.includes(x))
                      : view.columns.filter((x) => x !== c);
                    if (cols.length) setView({ ...view, columns: cols });
                  }}
                  data-testid={`column-${c}`}
                />
                {COLUMN_LABEL[c]}
              </label>
            ))}
          </fieldset>
        </details>
        <span className="toolbar-sep" />
        <span aria-live="polite" data-testid="selection-count">
          {selected.length ? `${selected.length} selected` : `${jobs.length} loaded${jobsQ.hasNextPage ? ' (more on scroll)' : ''}`}
        </span>
        {caps.mutateJobs &&
          (['cancel', 'hold', 'release'] as const).map((a) => (
            <button
              key={a}
              type="button"
              className={a === 'cancel' ? 'danger' : undefined}
              disabled={!selected.some((j) => actionApplies(a, j))}
              onClick={() => setPending(a)}
              data-testid={`bulk-${a}`}
            >
              {ACTION_LABEL[a]}
            </button>
          ))}
      </div>
      {result && (
        <div className={`notice ${result.failed.length ? 'notice-warn' : 'notice-ok'}`} role="status">
          {ACTION_LABEL[result.action]}: {result.ok} done
          {result.failed.length > 0 && `, ${result.failed.length} failed`}
          {result.failed.length > 0 && (
            <ul>
              {result.failed.slice(0, 10).map((f) => (
                <li key={f.name}>
                  <span className="mono">{lastSegment(f.name)}</span>: {f.error}
                </li>
              ))}
            </ul>
          )}{' '}
          <button type="button" className="link" onClick={() => setResult(null)}>
            Dismiss
          </button>
        </div>
      )}
      {newJobs.length > 0 && (
        <div className="notice" role="status">
          {newJobs.length} new job{newJobs.length > 1 ? 's' : ''} submitted.{' '}
          <button
            type="button"
            className="link"
            onClick={() => {
              setNewJobs([]);
              void jobsQ.refetch();
            }}
            data-testid="show-new-jobs"
          >
            Show them
          </button>
        </div>
      )}
      {jobsQ.isPending ? (
        <Loading label="Loading jobs…" />
      ) : err ? (
        unsupported ? (
          <div className="state state-error" role="alert" data-testid="unsupported-filter">
            <strong>This server cannot filter or sort jobs this way yet.</strong>
            <p className="mono">{err.message}</p>
            <p>The user, submitted-time and ordering filters need a newer gateway.</p>
            <button
              type="button"
              onClick={() =>
                setView({
                  ...view,
                  user: '',
                  createdAfter: '',
                  createdBefore: '',
                  sort: serverOrderBy(view.sort) ? defaultView().sort : view.sort,
                })
              }
            >
              Remove those filters
            </button>
          </div>
        ) : (
          <ErrorBox error={err} retry={() => void jobsQ.refetch()} />
        )
      ) : jobs.length === 0 ? (
        <Empty>
          No jobs match.{' '}
          {search.toString() ? (
            <button type="button" className="link" onClick={() => setView(defaultView())}>
              Clear the filters
            </button>
          ) : (
            caps.mutateJobs &&
            tenant !== '-' && <Link to={`/t/${encodeURIComponent(tenant)}/submit`}>Submit a job</Link>
          )}
        </Empty>
      ) : (
        <JobsGrid
          table={table}
          rows={rows}
          sortKey={sortKey}
          columnKey={columnKey}
          selection={rowSelection}
          labels={COLUMN_LABEL}
          allTenants={tenant === '-'}
          loaded={jobs.length}
          hasNextPage={hasNextPage}
          isFetchingNextPage={isFetchingNextPage}
          fetchNextPage={fetchMore}
          nextPageError={nextPageError}
        />
      )}
      <ConfirmDialog
        open={pending !== null}
        title={pending ? `${ACTION_LABEL[pending]} ${eligible.length} job${eligible.length === 1 ? '' : 's'}?` : ''}
        confirmLabel={pending ? `${ACTION_LABEL[pending]} ${eligible.length} job${eligible.length === 1 ? '' : 's'}` : ''}
        danger={pending === 'cancel'}
        askReason
        busy={busy}
        onCancel={() => setPending(null)}
        onConfirm={(reason) => void doBulk(reason)}
      >
        <p data-testid="confirm-count">
          {pending === 'cancel' && 'Queued jobs end at once; running ones are stopped by their dispatcher. '}
          {pending === 'hold' && 'Held jobs are set aside until released. '}
          {pending === 'release' && 'Released jobs go back to their old place in line. '}
          {selected.length > eligible.length &&
            `${selected.length - eligible.length} selected job${selected.length - eligible.length === 1 ? ' is' : 's are'} skipped (not in a state this applies to).`}
        </p>
      </ConfirmDialog>
    </>
  );
}

function JobFilters({ tenant, view, setView }: { tenant: string; view: JobsView; setView: (v: JobsView) => void }) {
  const queuesQ = useQuery({ queryKey: ['queues', tenant], queryFn: () => listQueues(tenant), staleTime: 60_000 });
  const projectsQ = useQuery({
    queryKey: ['projects', tenant],
    queryFn: () => listProjects(tenant),
    staleTime: 60_000,
    enabled: tenant !== '-',
  });
  const queueIds = [...new Set((queuesQ.data?.queues ?? []).map((q) => lastSegment(q.name)))].sort();
  const projectIds = (projectsQ.data?.projects ?? []).map((p) => lastSegment(p.name)).sort();
  const [draft, setDraft] = useState(() => ({
    user: view.user,
    jobSet: view.jobSet,
    labels: formatLabels(view.labels),
    project: view.project,
    after: view.createdAfter.slice(0, 16),
    before: view.createdBefore.slice(0, 16),
  }));

  const apply = (e: React.FormEvent) => {
    e.preventDefault();
    setView({
      ...view,
      user: draft.user.trim(),
      jobSet: draft.jobSet.trim(),
      labels: parseLabels(draft.labels),
      project: draft.project.trim(),
      createdAfter: localInputToRfc3339(draft.after),
      createdBefore: localInputToRfc3339(draft.before),
    });
  };
  const stateSummary = view.states.length ? view.states.map((s) => enumLabel(s, 'JOB_STATE_')).join(', ') : 'Any';

  return (
    <form className="filters" onSubmit={apply} aria-label="Job filters" data-testid="job-filters">
      <label className="field">
        <span>Queue</span>
        <select
          value={view.queue}
          onChange={(e) => setView({ ...view, queue: e.target.value })}
          data-testid="filter-queue"
        >
          <option value="">Any</option>
          {view.queue && !queueIds.includes(view.queue) && <option value={view.queue}>{view.queue}</option>}
          {queueIds.map((q) => (
            <option key={q} value={q}>
              {q}
            </option>
          ))}
        </select>
      </label>
      <div className="field">
        <span id="state-filter-label">State</span>
        <details className="menu">
          <summary aria-describedby="state-filter-label" data-testid="filter-state">
            {stateSummary}
          </summary>
          <fieldset className="menu-body">
            <legend className="sr-only">States</legend>
            {ALL_STATES.map((st) => (
              <label key={st} className="check">
                <input
                  type="checkbox"
                  checked={view.states.includes(st)}
                  onChange={(e) =>
                    setView({
                      ...view,
                      states: e.target.checked
                        ? ALL_STATES.filter((x) => x === st || view.states.includes(x))
                        : view.states.filter((x) => x !== st),
                    })
                  }
                  data-testid={`filter-state-${st}`}
                />
                {enumLabel(st, 'JOB_STATE_')}
              </label>
            ))}
          </fieldset>
        </details>
      </div>
      <label className="field">
        <span>Project</span>
        <input
          list="project-ids"
          value={draft.project}
          onChange={(e) => setDraft({ ...draft, project: e.target.value })}
          data-testid="filter-project"
        />
        <datalist id="project-ids">
          {projectIds.map((p) => (
            <option key={p} value={p} />
          ))}
        </datalist>
      </label>
      <label className="field">
        <span>User</span>
        <input
          placeholder="users/alice"
          value={draft.user}
          onChange={(e) => setDraft({ ...draft, user: e.target.value })}
          data-testid="filter-user"
        />
      </label>
      <label className="field">
        <span>Job set</span>
        <input
          value={draft.jobSet}
          onChange={(e) => setDraft({ ...draft, jobSet: e.target.value })}
          data-testid="filter-jobset"
        />
      </label>
      <label className="field">
        <span>Labels</span>
        <input
          placeholder="team=vision, env=prod"
          value={draft.labels}
          onChange={(e) => setDraft({ ...draft, labels: e.target.value })}
          data-testid="filter-labels"
        />
      </label>
      <label className="field">
        <span>Submitted after (UTC)</span>
        <input
          type="datetime-local"
          value={draft.after}
          onChange={(e) => setDraft({ ...draft, after: e.target.value })}
          data-testid="filter-after"
        />
      </label>
      <label className="field">
        <span>Submitted before (UTC)</span>
        <input
          type="datetime-local"
          value={draft.before}
          onChange={(e) => setDraft({ ...draft, before: e.target.value })}
          data-testid="filter-before"
        />
      </label>
      <label className="field">
        <span>Page size</span>
        <select
          value={view.pageSize}
          onChange={(e) => setView({ ...view, pageSize: Number(e.target.value) })}
          data-testid="filter-page-size"
        >
          {PAGE_SIZES.map((n) => (
            <option key={n} value={n}>
              {n}
            </option>
          ))}
        </select>
      </label>
      <div className="filter-buttons">
        <button type="submit" className="primary" data-testid="apply-filters">
          Apply
        </button>
        <button type="button" onClick={() => setView(defaultView())} data-testid="reset-filters">
          Reset view
        </button>
      </div>
    </form>
  );
}
