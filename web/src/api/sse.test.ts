import { describe, expect, it } from 'vitest';
import { SseParser, backoffMs, compareSequence } from './sse';

describe('SseParser', () => {
  it('parses events split across chunks at any byte', () => {
    const stream =
      ': keepalive\n\nid: 7\ndata: {"event":{"sequence":"7"}}\n\nid: 8\r\ndata: a\r\ndata: b\r\n\r\n';
    for (let cut = 0; cut <= stream.length; cut++) {
      const p = new SseParser();
      const events = [...p.push(stream.slice(0, cut)), ...p.push(stream.slice(cut))];
      expect(events).toEqual([
        { event: 'message', data: '{"event":{"sequence":"7"}}', id: '7' },
        { event: 'message', data: 'a\nb', id: '8' },
      ]);
      expect(p.lastEventId).toBe('8');
    }
  });
  it('handles bare CR line ends, comments, event types and retry', () => {
    const p = new SseParser();
    const ev = p.push('retry: 5000\r: comment\revent: error\rdata: {"code":503}\r\r');
    expect(ev).toEqual([{ event: 'error', data: '{"code":503}', id: '' }]);
    expect(p.retryMs).toBe(5000);
  });
  it('does not dispatch an event without data but keeps its id', () => {
    const p = new SseParser();
    expect(p.push('id: 12\n\n')).toEqual([]);
    expect(p.lastEventId).toBe('12');
    expect(p.push('data:x\n\n')).toEqual([{ event: 'message', data: 'x', id: '12' }]);
  });
  it('drops an unterminated event at the end', () => {
    const p = new SseParser();
    expect(p.push('data: partial')).toEqual([]);
    p.end();
    expect(p.push('\n\n')).toEqual([]);
  });
  it('keeps only one leading space of a value', () => {
    const p = new SseParser();
    expect(p.push('data:  two\n\n')[0]?.data).toBe(' two');
  });
});

describe('reconnect', () => {
  it('backs off exponentially to 30 s with bounded jitter', () => {
    expect(backoffMs(0, () => 0.5)).toBe(1000);
    expect(backoffMs(3, () => 0.5)).toBe(8000);
    expect(backoffMs(10, () => 0.5)).toBe(30000);
    expect(backoffMs(0, () => 0)).toBe(800);
    expect(backoffMs(0, () => 1)).toBe(1200);
  });
  it('compares uint64 sequences beyond 2^53', () => {
    expect(compareSequence('9007199254740993', '9007199254740992')).toBe(1);
    expect(compareSequence('10', '9')).toBe(1);
    expect(compareSequence('5', '5')).toBe(0);
    expect(compareSequence('', '1')).toBe(-1);
  });
});
