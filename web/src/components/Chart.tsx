// A small time-series chart on uPlot (canvas; ~50 KB). The data is also given as a table by
// the pages that use it, for screen readers.
import { useEffect, useRef } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';

export const PALETTE = ['#3b7dd8', '#d9822b', '#2e9e6b', '#c0487a', '#8a63d2', '#7a8a00', '#1c9bb0', '#b35c44'];

function cssVar(name: string, fallback: string): string {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

export interface ChartSeries {
  label: string;
  values: (number | null)[];
  color?: string;
  dash?: boolean;
}

export function TimeChart(p: {
  x: number[];
  series: ChartSeries[];
  height?: number;
  label: string;
  yFormat?: (v: number) => string;
  bars?: boolean;
  /** The x axis's span in Unix seconds (default: the data's). */
  xRange?: [number, number];
  testId?: string;
}) {
  const ref = useRef<HTMLDivElement>(null);
  const { x, series, height = 260, yFormat, bars, xRange } = p;
  useEffect(() => {
    const el = ref.current;
    if (!el) return;
    const fg = cssVar('--fg-muted', '#555');
    const grid = cssVar('--border', '#ddd');
    const opts: uPlot.Options = {
      width: Math.max(300, el.clientWidth),
      height,
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: xRange ? { time: true, range: () => xRange } : { time: true } },
      axes: [
        { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } },
        {
          stroke: fg,
          grid: { stroke: grid, width: 1 },
          ticks: { stroke: grid },
          size: 84,
          values: (_u, vals) => vals.map((v) => (yFormat ? yFormat(v) : String(v))),
        },
      ],
      series: [
        {},
        ...series.map((s, i) => ({
          label: s.label,
          stroke: s.color ?? PALETTE[i % PALETTE.length],
          width: bars ? 1 : 2,
          points: { show: !bars && !s.dash && x.length <= 20 },
          dash: s.dash ? [6, 4] : undefined,
          fill: bars ? `${s.color ?? PALETTE[i % PALETTE.length]}55` : undefined,
          paths: bars ? uPlot.paths.bars?.({ size: [0.8 / Math.max(1, series.length), 60] }) : undefined,
          value: (_u: uPlot, v: number | null) => (v === null ? '—' : yFormat ? yFormat(v) : String(v)),
        })),
      ],
    };
    const data = [x, ...series.map((s) => s.values)] as uPlot.AlignedData;
    const plot = new uPlot(opts, data, el);
    const ro = new ResizeObserver(() => plot.setSize({ width: Math.max(300, el.clientWidth), height }));
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.destroy();
    };
  }, [x, series, height, yFormat, bars, xRange]);
  return <div ref={ref} className="chart" role="img" aria-label={p.label} data-testid={p.testId} />;
}
