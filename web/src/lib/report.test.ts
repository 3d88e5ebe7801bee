import { describe, expect, it } from 'vitest';
import { budgetBurn, keyTotals, reportSeries } from './report';
import type { Report } from '../gen/trainyard/v1/accounting';

const usd = (micros: string) => ({ currencyCode: 'USD', micros });
const report: Report = {
  rows: [
    { keys: ['vision'], periodStart: '2026-11-02T00:00:00Z', cost: usd('2000000'), lostWorkCost: usd('500000'), gpuSeconds: '3600' },
    { keys: ['nlp'], periodStart: '2026-11-01T00:00:00Z', cost: usd('1000000') },
    { keys: ['vision'], periodStart: '2026-11-01T00:00:00Z', cost: usd('3000000'), gpuSeconds: '7200', lostGpuSeconds: '60' },
    { keys: [''], periodStart: '2026-11-02T00:00:00Z' },
  ],
};

describe('report series', () => {
  it('puts each key on the periods, largest total first, zero where absent', () => {
    const r = reportSeries(report);
    expect(r.x).toEqual([Date.UTC(2026, 10, 1) / 1000, Date.UTC(2026, 10, 2) / 1000]);
    expect(r.series).toEqual([
      { key: 'vision', micros: ['3000000', '2000000'], lostMicros: ['0', '500000'] },
      { key: 'nlp', micros: ['1000000', '0'], lostMicros: ['0', '0'] },
      { key: '(none)', micros: ['0', '0'], lostMicros: ['0', '0'] },
    ]);
  });
  it('totals per key exactly', () => {
    const t = keyTotals(report);
    expect(t[0]).toMatchObject({ key: 'vision', cost: '5000000', lostWork: '500000', gpuSeconds: 10800, lostGpuSeconds: 60 });
    expect(t.map((x) => x.key)).toEqual(['vision', 'nlp', '(none)']);
  });
});

describe('budget burn', () => {
  it('gives spent, forecast, the month gone and the threshold the forecast reached', () => {
    const b = budgetBurn(
      {
        monthlyAmount: usd('1000000000'),
        spent: usd('450000000'),
        forecast: usd('920000000'),
        thresholds: [
          { percent: 50, action: 'BUDGET_ACTION_WARN' as never },
          { percent: 90, action: 'BUDGET_ACTION_RESTRICT_TO_SPOT' as never },
          { percent: 100, action: 'BUDGET_ACTION_HOLD' as never },
        ],
      },
      new Date(Date.UTC(2026, 10, 16)),
    );
    expect(b.spentPct).toBe(45);
    expect(b.forecastPct).toBe(92);
    expect(b.monthPct).toBe(50);
    expect(b.reached).toEqual({ percent: 90, action: 'BUDGET_ACTION_RESTRICT_TO_SPOT' });
    expect(b.remainingMicros).toBe('550000000');
  });
  it('handles an empty budget', () => {
    expect(budgetBurn({}, new Date(Date.UTC(2026, 10, 1))).spentPct).toBe(0);
  });
});
