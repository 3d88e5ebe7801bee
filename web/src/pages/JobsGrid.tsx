import { memo, useEffect, useLayoutEffect, useMemo, useRef, type ChangeEvent, type MouseEvent } from 'react';
import { useNavigate } from 'react-router';
import { flexRender, type Row, type Table } from '@tanstack/react-table';
import { useVirtualizer } from '@tanstack/react-virtual';
import type { Job } from '../gen/trainyard/v1/job';
import { enumLabel, formatMoney, formatTime, lastSegment } from '../lib/format';
import type { ColumnId } from '../lib/viewState';
import { StateBadge } from '../components/StateBadge';
import { ErrorBox, Loading } from '../components/States';

/** Every row of the jobs table has this height (CSS `.jobs-grid` keeps cells on one line). */
export const ROW_HEIGHT = 37;

/** Column widths in rem; the Name column takes what is left (at least NAME_MIN_REM). */
const COLUMN_REM: Partial<Record<string, number>> = {
  select: 2.6,
  name: 7,
  state: 9,
  queue: 8,
  project: 8,
  jobSet: 8,
  creator: 8,
  priority: 5,
  gpus: 7,
  attempts: 5.5,
  createTime: 15,
  updateTime: 15,
  cost: 7,
  reason: 10,
};
const NAME_MIN_REM = 10;

/** The browser orders focus and the accessibility tree by CSS `reading-order` (Chromium 137+). */
const STABLE_DOM_ORDER = typeof CSS !== 'undefined' && CSS.supports('reading-flow', 'source-order');

/** Virtual items in slot order (index modulo `slots`). */
function bySlot<T extends { index: number }>(items: T[], slots: number): T[] {
  const out: (T | undefined)[] = new Array(slots);
  for (const it of items) out[it.index % slots] = it;
  return out.filter((it): it is T => it !== undefined);
}

export interface JobsGridProps {
  table: Table<Job>;
  /** The table's row model (its identity changes when the rows do). */
  rows: Row<Job>[];
  /** Identities of what the header and rows show besides `rows`: sorting, columns, selection. */
  sortKey: string;
  columnKey: string;
  selection: Record<string, boolean>;
  labels: Record<ColumnId, string>;
  /** The table lists several tenants' jobs: a job's link reads "tenant/id". */
  allTenants: boolean;
  /** Jobs loaded so far. */
  loaded: number;
  hasNextPage: boolean;
  isFetchingNextPage: boolean;
  fetchNextPage: () => void;
  nextPageError: unknown;
}

/**
 * The jobs table, an ARIA table of absolutely placed rows of one height (a CSS grid each, with
 * the columns' widths): a scroll renders only this component and the rows that come into view
 * (rows are memoized), and lays out and paints only those rows. A <table> was laid out whole
 * on every scroll step (4 ms of a 16 ms frame with 40 rows); the page with its filters and
 * toolbar does not render at all.
 */
export const JobsGrid = memo(function JobsGrid(p: JobsGridProps) {
  const { table, rows, labels } = p;
  const scrollRef = useRef<HTMLDivElement>(null);
  const virtualizer = useVirtualizer({
    count: rows.length,
    getScrollElement: () => scrollRef.current,
    estimateSize: () => ROW_HEIGHT,
    overscan: 3,
  });
  const items = virtualizer.getVirtualItems();
  const lastIndex = items.length ? (items[items.length - 1]?.index ?? 0) : 0;
  const { hasNextPage, isFetchingNextPage, fetchNextPage } = p;
  useEffect(() => {
    if (lastIndex >= rows.length - 20 && hasNextPage && !isFetchingNextPage) fetchNextPage();
  }, [lastIndex, rows.length, hasNextPage, isFetchingNextPage, fetchNextPage]);
  const leaves = table.getVisibleLeafColumns();
  // eslint-disable-next-line react-hooks/exhaustive-deps -- the column ids are what columnKey names
  const columnIds = useMemo(() => leaves.map((c) => c.id), [p.columnKey]);
  const navigate = useNavigate();
  // One handler of each kind for every row (a row's props keep their identity).
  const handlers = useMemo<RowHandlers>(
    () => ({
      onCheck: (e) => {
        const name = e.currentTarget.dataset.job;
        if (name) table.getRow(name).toggleSelected(e.currentTarget.checked);
      },
      onLink: (e) => {
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        e.preventDefault();
        navigate(e.currentTarget.getAttribute('href') ?? '/');
      },
    }),
    [table, navigate],
  );
  // Rows are keyed by a slot (the row's index modulo the most rows ever on screen), not by the
  // job: a row scrolled out hands its elements to the row scrolled in, which updates their text
  // and attributes instead of removing and creating a row's dozen elements every frame. Where
  // the browser has CSS reading-flow, the rows stay in slot order in the DOM as well (a row
  // moved in the DOM has its style and layout computed anew) and `reading-order` gives the Tab
  // key and assistive technology the rows' order; elsewhere they are in the rows' order.
  const slots = useRef(1);
  slots.current = Math.max(slots.current, items.length);
  const shown = STABLE_DOM_ORDER ? bySlot(items, slots.current) : items;
  // A focused checkbox or link whose row now shows another job loses focus (as it did when its
  // row was removed): a key press must not act on a job the user did not focus.
  const bodyRef = useRef<HTMLDivElement>(null);
  const focusedRow = useRef<string | null>(null);
  useLayoutEffect(() => {
    const a = document.activeElement;
    if (!(a instanceof HTMLElement) || !bodyRef.current?.contains(a)) return;
    if (a.closest('[role="row"]')?.getAttribute('data-testid') !== focusedRow.current) a.blur();
  });
  const template = leaves.map((c) => (COLUMN_REM[c.id] ? `${COLUMN_REM[c.id]}rem` : `minmax(${NAME_MIN_REM}rem, 1fr)`)).join(' ');
  const minWidth = leaves.reduce((sum, c) => sum + (COLUMN_REM[c.id] ?? NAME_MIN_REM), 0);

  return (
    <div className="table-scroll" ref={scrollRef} data-testid="jobs-table">
      <div role="table" aria-label="Jobs" aria-rowcount={rows.length + 1} className="jgrid" style={{ minWidth: `${minWidth}rem` }}>
        <JobsHead
          table={table}
          template={template}
          rows={rows}
          sortKey={p.sortKey}
          columnKey={p.columnKey}
          selection={p.selection}
        />
        <div
          role="rowgroup"
          className={STABLE_DOM_ORDER ? 'jgrid-body jgrid-reading-flow' : 'jgrid-body'}
          style={{ height: virtualizer.getTotalSize() }}
          ref={bodyRef}
          onFocus={(e) => {
            focusedRow.current = e.target.closest('[role="row"]')?.getAttribute('data-testid') ?? null;
          }}
        >
          {shown.map((vi) => {
            const row = rows[vi.index];
            if (!row) return null;
            return (
              <JobRow
                key={vi.index % slots.current}
                row={row}
                index={vi.index}
                top={vi.start}
                selected={p.selection[row.id] === true}
                columnIds={columnIds}
                style={template}
                labels={labels}
                allTenants={p.allTenants}
                handlers={handlers}
              />
            );
          })}
        </div>
      </div>
      <div className="table-foot">
        {isFetchingNextPage ? (
          <Loading label="Loading more jobs…" />
        ) : hasNextPage ? (
          <button type="button" onClick={fetchNextPage} data-testid="load-more">
            Load more
          </button>
        ) : (
          <span className="muted">All {p.loaded} matching jobs loaded.</span>
        )}
        {p.nextPageError != null && <ErrorBox error={p.nextPageError} title="Could not load more jobs" />}
      </div>
    </div>
  );
});

interface JobsHeadProps {
  table: Table<Job>;
  /** grid-template-columns. */
  template: string;
  /** What the header shows besides the columns (the select-all box reads every row). */
  rows: Row<Job>[];
  sortKey: string;
  columnKey: string;
  selection: Record<string, boolean>;
}

/**
 * The header row; memoized so that a scroll step does not render it (its select-all box asks
 * TanStack Table about every loaded row).
 */
const JobsHead = memo(function JobsHead({ table, template }: JobsHeadProps) {
  return (
    <div role="rowgroup" className="jgrid-head">
      {table.getHeaderGroups().map((hg) => (
        <div role="row" aria-rowindex={1} key={hg.id} className="jgrid-row" style={{ gridTemplateColumns: template }}>
          {hg.headers.map((h) => {
            const sorted = h.column.getIsSorted();
            return (
              <div
                role="columnheader"
                key={h.id}
                aria-sort={sorted === 'asc' ? 'ascending' : sorted === 'desc' ? 'descending' : undefined}
                className="jgrid-cell"
              >
                {h.column.getCanSort() ? (
                  <button
                    type="button"
                    className="sort"
                    onClick={h.column.getToggleSortingHandler()}
                    data-testid={`sort-${h.id}`}
                  >
                    {flexRender(h.column.columnDef.header, h.getContext())}
                    <span aria-hidden="true">{sorted === 'asc' ? ' ▲' : sorted === 'desc' ? ' ▼' : ''}</span>
                  </button>
                ) : (
                  flexRender(h.column.columnDef.header, h.getContext())
                )}
              </div>
            );
          })}
        </div>
      ))}
    </div>
  );
});

/** Total GPUs of a job: workers × GPUs per worker. */
export function totalGpus(j: Job): number {
  return (j.spec?.workers ?? 1) * (j.spec?.resources?.gpus ?? 0);
}

/** The job page's path for a job named tenants/{t}/jobs/{id}. */
export function jobPath(name: string | undefined): string {
  const t = name?.split('/')[1] ?? '';
  return `/t/${encodeURIComponent(t)}/jobs/${encodeURIComponent(lastSegment(name))}`;
}

interface RowHandlers {
  /** A selection checkbox changed (the job's name is in its data-job attribute). */
  onCheck: (e: ChangeEvent<HTMLInputElement>) => void;
  /** A job link was clicked (navigates inside the app for a plain click). */
  onLink: (e: MouseEvent<HTMLAnchorElement>) => void;
}

/**
 * One body cell, straight from the job's fields: a cell is one element with its text (and the
 * badge, link or checkbox where the column has one); no TanStack cell object or flexRender.
 */
function bodyCell(id: string, j: Job, allTenants: boolean, selected: boolean, h: RowHandlers) {
  const name = j.name ?? '';
  const jobId = lastSegment(name);
  switch (id) {
    case 'select':
      return (
        <div role="cell" key={id} className="jgrid-cell">
          <input
            type="checkbox"
            aria-label={`Select job ${jobId}`}
            checked={selected}
            onChange={h.onCheck}
            data-job={name}
            data-testid={`select-${jobId}`}
          />
        </div>
      );
    case 'name':
      return (
        <div role="cell" key={id} className="jgrid-cell">
          <a href={jobPath(name)} onClick={h.onLink}>
            {allTenants ? `${name.split('/')[1] ?? ''}/${jobId}` : jobId}
          </a>
        </div>
      );
    case 'displayName':
      return (
        <div role="cell" key={id} className="jgrid-cell" data-testid="job-display-name" title={j.displayName || undefined}>
          {j.displayName ?? ''}
        </div>
      );
    case 'state':
      return (
        <div role="cell" key={id} className="jgrid-cell">
          <StateBadge state={j.state ?? ''} />
          {j.cancelRequested && <span className="muted small"> cancelling</span>}
        </div>
      );
    case 'gpus': {
      const w = j.spec?.workers ?? 1;
      const g = j.spec?.resources?.gpus ?? 0;
      const model = j.spec?.resources?.gpuModel;
      return (
        <div role="cell" key={id} className="jgrid-cell">
          {`${w > 1 ? `${w}×${g}` : g}${model ? ` ${model}` : ''}`}
        </div>
      );
    }
    case 'reason':
      return (
        <div role="cell" key={id} className="jgrid-cell" title={j.stateMessage || undefined}>
          {j.stateReason ?? ''}
        </div>
      );
    default:
      return (
        <div role="cell" key={id} className="jgrid-cell">
          {cellText(id, j)}
        </div>
      );
  }
}

/** The text of a column that shows only text. */
function cellText(id: string, j: Job): string {
  switch (id) {
    case 'queue':
      return j.spec?.queue ?? '';
    case 'project':
      return j.spec?.project ?? '';
    case 'jobSet':
      return j.spec?.jobSet ?? '';
    case 'creator':
      return j.creator ?? '';
    case 'priority':
      return String(j.priority ?? 0);
    case 'attempts':
      return String(j.attemptCount ?? 0);
    case 'createTime':
      return formatTime(j.createTime);
    case 'updateTime':
      return formatTime(j.updateTime);
    case 'cost':
      return j.cost ? formatMoney(j.cost.spent) : '—';
    default:
      return '';
  }
}

interface JobRowProps {
  row: Row<Job>;
  /** The row's place among the table's rows (0 is the first below the header). */
  index: number;
  /** Its offset from the top of the body, in px. */
  top: number;
  selected: boolean;
  /** The visible columns' ids. */
  columnIds: string[];
  /** grid-template-columns. */
  style: string;
  labels: Record<ColumnId, string>;
  allTenants: boolean;
  handlers: RowHandlers;
}

/** One row; rendered again only when its job, place, selection or the columns change. */
const JobRow = memo(function JobRow({ row, index, top, selected, columnIds, style, labels, allTenants, handlers }: JobRowProps) {
  const place = { transform: `translateY(${top}px)`, gridTemplateColumns: style, readingOrder: String(index) };
  if (row.getIsGrouped()) {
    return (
      <div role="row" aria-rowindex={index + 2} className="jgrid-row group-row" style={place} data-testid={`group-${String(row.groupingValue)}`}>
        <div role="rowheader" className="jgrid-cell jgrid-span">
          {labels[row.groupingColumnId as ColumnId]}:{' '}
          {row.groupingColumnId === 'state'
            ? enumLabel(String(row.groupingValue), 'JOB_STATE_')
            : String(row.groupingValue) || '(none)'}{' '}
          <span className="muted">({row.subRows.length})</span>
        </div>
      </div>
    );
  }
  const j = row.original;
  return (
    <div
      role="row"
      aria-rowindex={index + 2}
      aria-selected={selected}
      className={selected ? 'jgrid-row selected' : 'jgrid-row'}
      style={place}
      data-testid={`job-row-${lastSegment(j.name)}`}
    >
      {columnIds.map((id) => bodyCell(id, j, allTenants, selected, handlers))}
    </div>
  );
});
