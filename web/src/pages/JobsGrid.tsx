import { memo, useEffect, useRef } from 'react';
import { flexRender, type Row, type Table } from '@tanstack/react-table';
import { useVirtualizer } from '@tanstack/react-virtual';
import type { Job } from '../gen/trainyard/v1/job';
import { enumLabel, lastSegment } from '../lib/format';
import type { ColumnId } from '../lib/viewState';
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

export interface JobsGridProps {
  table: Table<Job>;
  /** The table's row model (its identity changes when the rows do). */
  rows: Row<Job>[];
  /** Identities of what the header and rows show besides `rows`: sorting, columns, selection. */
  sortKey: string;
  columnKey: string;
  selection: Record<string, boolean>;
  labels: Record<ColumnId, string>;
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
  const template = leaves.map((c) => (COLUMN_REM[c.id] ? `${COLUMN_REM[c.id]}rem` : `minmax(${NAME_MIN_REM}rem, 1fr)`)).join(' ');
  const minWidth = leaves.reduce((sum, c) => sum + (COLUMN_REM[c.id] ?? NAME_MIN_REM), 0);
  const style = { gridTemplateColumns: template } as const;

  return (
    <div className="table-scroll" ref={scrollRef} data-testid="jobs-table">
      <div role="table" aria-label="Jobs" aria-rowcount={rows.length + 1} className="jgrid" style={{ minWidth: `${minWidth}rem` }}>
        <div role="rowgroup" className="jgrid-head">
          {table.getHeaderGroups().map((hg) => (
            <div role="row" aria-rowindex={1} key={hg.id} className="jgrid-row" style={style}>
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
        <div role="rowgroup" className="jgrid-body" style={{ height: virtualizer.getTotalSize() }}>
          {items.map((vi) => {
            const row = rows[vi.index];
            if (!row) return null;
            return (
              <JobRow
                key={row.id}
                row={row}
                index={vi.index}
                top={vi.start}
                selected={p.selection[row.id] === true}
                columnKey={p.columnKey}
                style={template}
                labels={labels}
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

interface JobRowProps {
  row: Row<Job>;
  /** The row's place among the table's rows (0 is the first below the header). */
  index: number;
  /** Its offset from the top of the body, in px. */
  top: number;
  selected: boolean;
  /** The visible columns (a row renders again when they change). */
  columnKey: string;
  /** grid-template-columns. */
  style: string;
  labels: Record<ColumnId, string>;
}

/** One row; rendered again only when its job, place, selection or the columns change. */
const JobRow = memo(function JobRow({ row, index, top, selected, style, labels }: JobRowProps) {
  const place = { transform: `translateY(${top}px)`, gridTemplateColumns: style };
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
  return (
    <div
      role="row"
      aria-rowindex={index + 2}
      aria-selected={selected}
      className={selected ? 'jgrid-row selected' : 'jgrid-row'}
      style={place}
      data-testid={`job-row-${lastSegment(row.original.name)}`}
    >
      {row.getVisibleCells().map((c) => (
        <div role="cell" key={c.id} className="jgrid-cell">
          {flexRender(c.column.columnDef.cell, c.getContext())}
        </div>
      ))}
    </div>
  );
});
