import { createRow, getMemoOptions, memo, type Row, type RowData, type RowModel, type Table } from '@tanstack/react-table';

/**
 * TanStack Table's core row model, keeping the Row of every data item that is still the same
 * object at the same index. The stock getCoreRowModel makes a new Row (with its few dozen
 * methods) for every loaded job whenever the data changes; the jobs page appends a page of 100
 * jobs to thousands, so each page cost O(all loaded jobs) in rows and garbage, and a scroll that
 * loaded pages stalled for up to 100 ms. Here a new page costs its own rows only.
 *
 * Rows are reused only while the columns are the same (a Row caches its accessors' values) and
 * the data has no sub-rows (the jobs table has none).
 */
export function getCachedCoreRowModel<TData extends RowData>(): (table: Table<TData>) => () => RowModel<TData> {
  return (table) => {
    let cache = new WeakMap<object, Row<TData>>();
    let cachedColumns: unknown = null;
    return memo(
      () => [table.options.data, table.options.columns],
      (data, columns) => {
        if (columns !== cachedColumns) {
          cache = new WeakMap();
          cachedColumns = columns;
        }
        const rows: Row<TData>[] = [];
        const rowsById: Record<string, Row<TData>> = {};
        for (let i = 0; i < data.length; i++) {
          const original = data[i] as TData;
          const id = table._getRowId(original, i);
          let row = typeof original === 'object' && original !== null ? cache.get(original) : undefined;
          if (!row || row.index !== i || row.id !== id) {
            row = createRow(table, id, original, i, 0);
            if (typeof original === 'object' && original !== null) cache.set(original, row);
          }
          rows.push(row);
          rowsById[id] = row;
        }
        return { rows, flatRows: rows, rowsById };
      },
      getMemoOptions(table.options, 'debugTable', 'getRowModel', () => table._autoResetPageIndex()),
    );
  };
}
