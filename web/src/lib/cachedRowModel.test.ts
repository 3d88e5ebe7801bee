import { describe, expect, it } from 'vitest';
import { createTable, getCoreRowModel, type ColumnDef, type TableOptionsResolved } from '@tanstack/react-table';
import { getCachedCoreRowModel } from './cachedRowModel';

interface Item {
  name: string;
  gpus: number;
}

const columns: ColumnDef<Item>[] = [
  { id: 'name', accessorFn: (i) => i.name },
  { id: 'gpus', accessorFn: (i) => i.gpus },
];

function table(data: Item[], cols: ColumnDef<Item>[], cached: boolean) {
  const options: TableOptionsResolved<Item> = {
    data,
    columns: cols,
    state: {},
    onStateChange: () => {},
    renderFallbackValue: null,
    getRowId: (i) => i.name,
    getCoreRowModel: cached ? getCachedCoreRowModel() : getCoreRowModel(),
  };
  const t = createTable(options);
  return {
    t,
    set(next: Item[], nextCols: ColumnDef<Item>[] = cols) {
      t.setOptions((o) => ({ ...o, data: next, columns: nextCols }));
    },
  };
}

const items = (n: number, from = 0) => Array.from({ length: n }, (_, i) => ({ name: `job-${from + i}`, gpus: (from + i) % 8 }));

describe('getCachedCoreRowModel', () => {
  it('gives the rows the stock core row model gives', () => {
    const data = items(250);
    const stock = table(data, columns, false).t.getCoreRowModel();
    const ours = table(data, columns, true).t.getCoreRowModel();
    const shape = (m: typeof stock) => m.rows.map((r) => [r.id, r.index, r.depth, r.original, r.getValue('gpus')]);
    expect(shape(ours)).toEqual(shape(stock));
    expect(Object.keys(ours.rowsById)).toEqual(Object.keys(stock.rowsById));
    expect(ours.flatRows.map((r) => r.id)).toEqual(stock.flatRows.map((r) => r.id));
  });

  it('keeps the rows of a page already loaded when the next page is appended', () => {
    const first = items(100);
    const { t, set } = table(first, columns, true);
    const before = t.getCoreRowModel().rows;
    set([...first, ...items(100, 100)]);
    const after = t.getCoreRowModel().rows;
    expect(after).toHaveLength(200);
    for (let i = 0; i < 100; i++) expect(after[i]).toBe(before[i]);
    expect(after[150]?.original.name).toBe('job-150');
    expect(after[150]?.index).toBe(150);
  });

  it('makes a new row for a changed item, a moved item and new columns', () => {
    const data = items(3);
    const { t, set } = table(data, columns, true);
    const [r0, r1, r2] = t.getCoreRowModel().rows;
    const changed = { ...data[1]!, gpus: 99 };
    set([data[0]!, changed, data[2]!]);
    let rows = t.getCoreRowModel().rows;
    expect(rows[0]).toBe(r0);
    expect(rows[1]).not.toBe(r1);
    expect(rows[1]?.getValue('gpus')).toBe(99);
    expect(rows[2]).toBe(r2);
    // A new item at the front moves the others: their index changed, so their rows are new.
    set([{ name: 'job-new', gpus: 1 }, ...data]);
    rows = t.getCoreRowModel().rows;
    expect(rows.map((r) => r.index)).toEqual([0, 1, 2, 3]);
    expect(rows[1]).not.toBe(r0);
    // New columns: no row is kept (a row caches its accessors' values).
    const before = t.getCoreRowModel().rows;
    const doubled: ColumnDef<Item>[] = [columns[0]!, { id: 'gpus', accessorFn: (i) => i.gpus * 2 }];
    set([{ name: 'job-new', gpus: 1 }, ...data], doubled);
    rows = t.getCoreRowModel().rows;
    expect(rows[0]).not.toBe(before[0]);
    expect(rows[0]?.getValue('gpus')).toBe(2);
  });
});
