// What the job page's Logs panel shows of an attempt's output: the pieces GetLogs answers, each
// from where the last ended, joined; at most MAX_LOG_CHARS of the newest are kept in the page.
import type { JobLogs } from '../gen/trainyard/v1/job';

export const MAX_LOG_CHARS = 1 << 20;

export interface LogView {
  attempt: number;
  backendJobName: string;
  text: string;
  /** Byte offset of the output where `text` starts, as the server said (int64 as a string). */
  startOffset: string;
  /** Bytes of output copied so far: where the next piece is asked from. */
  endOffset: string;
  complete: boolean;
  /** Why there is no output, when there is none. */
  reason: string;
  /** Text was dropped from the head of the page's copy (over MAX_LOG_CHARS). */
  trimmed: boolean;
}

/**
 * `view` with `piece` added. A piece of another attempt, or one that does not start where the
 * view ends (the server skipped bytes it no longer keeps), replaces the view.
 */
export function appendLogs(view: LogView | undefined, piece: JobLogs, max = MAX_LOG_CHARS): LogView {
  const attempt = piece.attempt ?? 0;
  const start = piece.startOffset ?? '0';
  const continues = view !== undefined && view.attempt === attempt && view.endOffset === start;
  let text = continues ? view.text + (piece.text ?? '') : (piece.text ?? '');
  let trimmed = continues ? view.trimmed : false;
  if (text.length > max) {
    text = text.slice(text.length - max);
    trimmed = true;
  }
  return {
    attempt,
    backendJobName: piece.backendJobName ?? '',
    text,
    startOffset: continues ? view.startOffset : start,
    endOffset: piece.endOffset ?? start,
    complete: piece.complete ?? false,
    reason: piece.unavailableReason ?? '',
    trimmed,
  };
}
