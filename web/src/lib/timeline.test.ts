import { describe, expect, it } from 'vitest';
import { timelineSegments } from './timeline';
import { explainReason } from './explain';

const T = (m: number) => new Date(Date.UTC(2026, 10, 28, 0, m)).toISOString();
const ms = (m: number) => Date.UTC(2026, 10, 28, 0, m);

describe('attempt timeline', () => {
  it('lays out queued, admitted and running phases, then the wait after a preemption', () => {
    const { segments, start, end } = timelineSegments(
      {
        state: 'JOB_STATE_QUEUED' as never,
        createTime: T(0),
        attempts: [
          { index: 1, admitTime: T(5), startTime: T(6), endTime: T(20), failureClass: 'FAILURE_CLASS_PREEMPTION' as never },
        ],
      },
      ms(30),
    );
    expect(segments).toEqual([
      { attempt: 1, phase: 'queued', start: ms(0), end: ms(5), open: false },
      { attempt: 1, phase: 'admitted', start: ms(5), end: ms(6), open: false },
      { attempt: 1, phase: 'running', start: ms(6), end: ms(20), open: false },
      { attempt: 2, phase: 'queued', start: ms(20), end: ms(30), open: true },
    ]);
    expect(start).toBe(ms(0));
    expect(end).toBe(ms(30));
  });
  it('keeps a running attempt open until now', () => {
    const { segments } = timelineSegments(
      { state: 'JOB_STATE_RUNNING' as never, createTime: T(0), attempts: [{ index: 1, admitTime: T(0), startTime: T(1) }] },
      ms(10),
    );
    expect(segments.at(-1)).toEqual({ attempt: 1, phase: 'running', start: ms(1), end: ms(10), open: true });
  });
  it('explains reason codes with or without their message', () => {
    expect(explainReason('QUOTA_EXHAUSTED: queue a gpu 8/8')).toMatch(/quota/);
    expect(explainReason('SOMETHING_NEW')).toBe('');
  });
});
