// A server-sent-events parser (the WHATWG event-stream format) fed with text chunks as they
// arrive from a fetch() ReadableStream: EventSource cannot send an Authorization header.
export interface SseEvent {
  /** The `event:` field; "message" when absent. */
  event: string;
  /** The `data:` lines joined with "\n". */
  data: string;
  /** The last event id in force when the event was dispatched (may be ""). */
  id: string;
}

export class SseParser {
  private buffer = '';
  private data: string[] = [];
  private eventType = '';
  private sawData = false;
  /** The previous chunk ended in "\r": a "\n" starting the next one belongs to it. */
  private skipLf = false;
  /** The last `id:` seen (kept across events, as the spec's last event ID buffer). */
  lastEventId = '';
  /** The last `retry:` value in ms, if the server sent one. */
  retryMs: number | undefined;

  /** Feeds a chunk; returns the events completed by it. */
  push(chunk: string): SseEvent[] {
    if (this.skipLf && chunk.startsWith('\n')) chunk = chunk.slice(1);
    this.skipLf = false;
    this.buffer += chunk;
    const out: SseEvent[] = [];
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this.buffer);
      if (!m) break;
      const line = this.buffer.slice(0, m.index);
      this.buffer = this.buffer.slice(m.index + m[0].length);
      // A "\r" ending the chunk may be the first half of a "\r\n" split across chunks.
      if (m[0] === '\r' && this.buffer === '') this.skipLf = true;
      const ev = this.line(line);
      if (ev) out.push(ev);
    }
    return out;
  }

  /** Ends the stream: an unterminated event is dropped, as the spec says. */
  end(): void {
    this.buffer = '';
    this.skipLf = false;
    this.data = [];
    this.eventType = '';
    this.sawData = false;
  }

  private line(line: string): SseEvent | undefined {
    if (line === '') {
      const had = this.sawData;
      const ev: SseEvent = {
        event: this.eventType || 'message',
        data: this.data.join('\n'),
        id: this.lastEventId,
      };
      this.data = [];
      this.eventType = '';
      this.sawData = false;
      return had ? ev : undefined;
    }
    if (line.startsWith(':')) return undefined; // comment (": keepalive")
    const colon = line.indexOf(':');
    const field = colon >= 0 ? line.slice(0, colon) : line;
    let value = colon >= 0 ? line.slice(colon + 1) : '';
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        this.data.push(value);
        this.sawData = true;
        break;
      case 'event':
        this.eventType = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.lastEventId = value;
        break;
      case 'retry':
        if (/^\d+$/.test(value)) this.retryMs = Number(value);
        break;
      default:
        break; // unknown fields are ignored
    }
    return undefined;
  }
}

/** Reconnect delay after `failures` consecutive failures: 1 s doubling to 30 s, +-20% jitter. */
export function backoffMs(failures: number, random: () => number = Math.random): number {
  const base = Math.min(30000, 1000 * 2 ** Math.max(0, failures));
  const jitter = 0.8 + 0.4 * random();
  return Math.round(base * jitter);
}

/** Compares two uint64 decimal strings (sequences). */
export function compareSequence(a: string, b: string): number {
  const x = BigInt(a || '0');
  const y = BigInt(b || '0');
  return x < y ? -1 : x > y ? 1 : 0;
}
