import { describe, expect, it } from 'vitest';
import { appendLogs } from './logTail';

describe('appendLogs', () => {
  it('joins pieces that continue each other and keeps the first offset', () => {
    let v = appendLogs(undefined, { attempt: 2, backendJobName: 'ty-5-2', text: 'ab\n', startOffset: '0', endOffset: '3' });
    v = appendLogs(v, { attempt: 2, backendJobName: 'ty-5-2', text: 'cd\n', startOffset: '3', endOffset: '6' });
    v = appendLogs(v, { attempt: 2, backendJobName: 'ty-5-2', text: '', startOffset: '6', endOffset: '6', complete: true });
    expect(v).toEqual({
      attempt: 2,
      backendJobName: 'ty-5-2',
      text: 'ab\ncd\n',
      startOffset: '0',
      endOffset: '6',
      complete: true,
      reason: '',
      trimmed: false,
    });
  });

  it('starts over when bytes were skipped or the attempt changed', () => {
    const v = appendLogs(undefined, { attempt: 1, text: 'old', startOffset: '0', endOffset: '3' });
    const gap = appendLogs(v, { attempt: 1, text: 'tail', startOffset: '100', endOffset: '104' });
    expect(gap.text).toBe('tail');
    expect(gap.startOffset).toBe('100');
    const next = appendLogs(gap, { attempt: 2, text: 'new', startOffset: '0', endOffset: '3' });
    expect(next.text).toBe('new');
    expect(next.attempt).toBe(2);
  });

  it('keeps only the newest characters past the limit', () => {
    let v = appendLogs(undefined, { attempt: 1, text: '0123', startOffset: '0', endOffset: '4' }, 6);
    v = appendLogs(v, { attempt: 1, text: '4567', startOffset: '4', endOffset: '8' }, 6);
    expect(v.text).toBe('234567');
    expect(v.trimmed).toBe(true);
    expect(v.startOffset).toBe('0');
  });

  it('carries the reason there is no output', () => {
    const v = appendLogs(undefined, { attempt: 0, unavailableReason: 'the job has not run yet (it is QUEUED)' });
    expect(v.reason).toMatch(/not run yet/);
    expect(v.text).toBe('');
  });
});
