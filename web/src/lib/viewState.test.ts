import { describe, expect, it } from 'vitest';
import {
  defaultView,
  localInputToRfc3339,
  parseLabels,
  parseView,
  serializeView,
  serverOrderBy,
} from './viewState';

describe('jobs view <-> URL', () => {
  it('leaves the default view out of the URL', () => {
    expect(serializeView(defaultView()).toString()).toBe('');
    expect(parseView(new URLSearchParams(''))).toEqual(defaultView());
  });
  it('round-trips every part of a view', () => {
    const v = defaultView();
    v.queue = 'research';
    v.project = 'llm';
    v.states = ['JOB_STATE_RUNNING', 'JOB_STATE_QUEUED'];
    v.user = 'users/alice';
    v.jobSet = 'sweep-1';
    v.labels = { team: 'vision', 'a/b': 'x=y' };
    v.createdAfter = '2026-11-01T00:00:00Z';
    v.createdBefore = '2026-11-02T00:00:00Z';
    v.sort = { id: 'priority', desc: false };
    v.columns = ['name', 'state', 'cost'];
    v.groupBy = 'jobSet';
    v.pageSize = 250;
    const url = serializeView(v).toString();
    expect(parseView(new URLSearchParams(url))).toEqual(v);
    expect(url).toContain('sort=priority');
    expect(url).toContain('label=a%2Fb%3Dx%3Dy');
  });
  it('ignores unknown or hostile values', () => {
    const v = parseView(
      new URLSearchParams('state=<script>&cols=evil,name&group=nope&size=7&sort=-bogus'),
    );
    expect(v.states).toEqual([]);
    expect(v.columns).toEqual(['name']);
    expect(v.groupBy).toBe('');
    expect(v.pageSize).toBe(100);
    expect(v.sort).toEqual(defaultView().sort);
  });
  it('asks the server to order only by what it can', () => {
    expect(serverOrderBy({ id: 'createTime', desc: true })).toBeUndefined();
    expect(serverOrderBy({ id: 'createTime', desc: false })).toBe('create_time asc');
    expect(serverOrderBy({ id: 'updateTime', desc: true })).toBe('update_time desc');
    expect(serverOrderBy({ id: 'priority', desc: true })).toBeUndefined();
  });
  it('parses label lists and datetime-local values as UTC', () => {
    expect(parseLabels('team=vision, env = prod,bad')).toEqual({ team: 'vision', env: 'prod' });
    expect(localInputToRfc3339('2026-11-28T03:42')).toBe('2026-11-28T03:42:00Z');
    expect(localInputToRfc3339('')).toBe('');
  });
});
