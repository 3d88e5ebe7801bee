// The jobs page with a large tenant (test_bench.py seeds 100,000 queued jobs): measured in the
// browser, printed as one JSON line (BENCH_JSON {...}); exits 1 if a limit is broken.
//
//   loadMs       navigation start -> the first job row on screen (the page's own clock)
//   interactiveMs  the first moment after that when the main thread answers a frame within
//                50 ms and stays free of long tasks for 500 ms (a time-to-interactive)
//   sortMs       oldest first -> a click on the Submitted header -> the first row shows a
//                different job (newest first, fetched from the server)
//   sortNameMs   then a click on the Name header -> the first row shows another job (the
//                server's order by display name)
//   filterMs     a state filter checked -> the table shows only that state's jobs
//   sortApiMs, sortNameApiMs, filterApiMs: the ListJobs request each of those made, as the
//                browser timed it
//   scrollMaxFrameMs, scrollFrames, scrollLongTasks: a scripted scroll of the table (one step
//                of 400 px per frame for 4 s, loading further pages as it goes), the longest
//                gap between two animation frames and the long tasks (>= 50 ms) seen
//
// Limits: interactive <= 1500 ms, sort and filter <= 300 ms, no scroll frame over 50 ms.
// After the scroll, the Tab key must visit the rendered rows in order (JobsGrid reuses rows'
// elements out of DOM order).
// Clicks are DOM clicks (HTMLElement.click()) made inside the page, so the clock starts at the
// click itself; jobs_input.mjs checks that trusted clicks work too.
import { BASE, env, log, newPage, scenario, settle, shot, signIn, sleep } from './lib.mjs';

const LIMITS = { interactiveMs: 1500, sortMs: 300, sortNameMs: 300, filterMs: 300, scrollMaxFrameMs: 50 };
const STEP_TIMEOUT = Number(process.env.E2E_BENCH_STEP_TIMEOUT_MS || 10_000);

await scenario('bench_jobs_page', async (browser) => {
  const token = env('E2E_TOKEN_DEMO');
  const page = await newPage(browser);
  await signIn(page, token);
  // Instruments every document: long tasks and when the first job row appears.
  await page.context().addInitScript(() => {
    window.__bench = { longTasks: [], firstRow: null };
    // Room for every request of the run in the resource timing buffer (250 by default).
    performance.setResourceTimingBufferSize(100_000);
    try {
      new PerformanceObserver((l) => {
        for (const e of l.getEntries()) window.__bench.longTasks.push([e.startTime, e.duration]);
      }).observe({ type: 'longtask', buffered: true });
    } catch {
      // no long task API
    }
    const mo = new MutationObserver(() => {
      if (window.__bench.firstRow === null && document.querySelector('[data-testid^="job-row-"]')) {
        // The row is in the DOM; the next frame paints it.
        requestAnimationFrame(() => {
          if (window.__bench.firstRow === null) window.__bench.firstRow = performance.now();
        });
      }
    });
    document.addEventListener('DOMContentLoaded', () => mo.observe(document.body, { childList: true, subtree: true }));
  });

  const result = { jobsInTenant: Number(env('E2E_BENCH_JOBS', '0')) || undefined };
  // --- load ---
  await page.goto(`${BASE()}/t/demo/jobs`);
  await page.waitForFunction(() => window.__bench.firstRow !== null, undefined, { timeout: 30_000 });
  result.loadMs = Math.round(await page.evaluate(() => window.__bench.firstRow));
  result.interactiveMs = Math.round(
    await page.evaluate(async (limit) => {
      // Poll frames: interactive once a frame comes within 50 ms and no long task starts in
      // the next 500 ms.
      const start = window.__bench.firstRow;
      const frame = () => new Promise((r) => requestAnimationFrame(() => r(performance.now())));
      for (;;) {
        const asked = performance.now();
        const got = await frame();
        if (got - asked <= 50) {
          const candidate = Math.max(start, asked);
          await new Promise((r) => setTimeout(r, 500));
          const late = window.__bench.longTasks.some(([s, d]) => s + d > candidate);
          if (!late) return candidate;
        }
        if (performance.now() > start + limit) return performance.now();
      }
    }, 15_000),
  );
  result.rowsOnLoad = await page.locator('[data-testid^="job-row-"]').count();
  await settle(page);
  await shot(page, 'bench-jobs');

  // The ListJobs requests the page made since `mark` (its clock): the longest, as the browser
  // timed it (request start to the last byte).
  const listJobsTime = (mark) =>
    page.evaluate((m) => {
      const d = performance
        .getEntriesByType('resource')
        .filter((e) => e.startTime >= m && /\/v1\/tenants\/demo\/jobs(\?|$)/.test(new URL(e.name).pathname + new URL(e.name).search))
        .map((e) => Math.round(e.responseEnd - e.startTime));
      return d.length ? Math.max(...d) : null;
    }, mark);

  const firstRowId = () =>
    page.evaluate(() => document.querySelector('[data-testid^="job-row-"]')?.getAttribute('data-testid') ?? '');

  // --- sort: oldest first (the server's order_by create_time asc), then a click on the
  // Submitted header asks for newest first: a new first page from the server. (From the
  // default newest-first a click cannot sort ascending today: TanStack's toggle removes the
  // sort, which falls back to newest first; docs/console.md "Tests".)
  await page.goto(`${BASE()}/t/demo/jobs?sort=createTime`);
  await page.waitForFunction(() => window.__bench.firstRow !== null, undefined, { timeout: 30_000 });
  await settle(page);
  await sleep(500);
  const before = await firstRowId();
  let mark;
  // A click on a column header; the time until the first row shows another job.
  const sortBy = (column, before) =>
    page.evaluate(
      async ({ column, before, timeout }) => {
        const t0 = performance.now();
        document.querySelector(`[data-testid="sort-${column}"]`).click();
        for (;;) {
          await new Promise((r) => requestAnimationFrame(r));
          const now = document.querySelector('[data-testid^="job-row-"]')?.getAttribute('data-testid') ?? '';
          if (now && now !== before) return [Math.round(performance.now() - t0), t0];
          if (performance.now() - t0 > timeout) return [null, t0];
        }
      },
      { column, before, timeout: STEP_TIMEOUT },
    );
  [result.sortMs, mark] = await sortBy('createTime', before);
  result.sortApiMs = await listJobsTime(mark);
  log('sort:', result.sortMs, 'ms (ListJobs', result.sortApiMs, 'ms); first row', before, '->', await firstRowId());
  // --- sort by name (the server's order_by display_name: the names' index, not the ids') ---
  await settle(page);
  const newest = await firstRowId();
  [result.sortNameMs, mark] = await sortBy('displayName', newest);
  result.sortNameApiMs = await listJobsTime(mark);
  log('sort by name:', result.sortNameMs, 'ms (ListJobs', result.sortNameApiMs, 'ms); first row', newest, '->', await firstRowId());

  // --- filter: only HELD jobs (test_bench.py holds 20, none of them on the first screen) ---
  await page.evaluate(() => document.querySelector('[data-testid="filter-state"]')?.click());
  const filtered = await page.evaluate(
    async ({ timeout }) => {
      const held = (r) => /held/i.test(r.textContent ?? '');
      if ([...document.querySelectorAll('[data-testid^="job-row-"]')].some(held)) {
        throw new Error('held jobs are on screen before the filter: the step would time nothing');
      }
      const t0 = performance.now();
      document.querySelector('[data-testid="filter-state-JOB_STATE_HELD"]').click();
      for (;;) {
        await new Promise((r) => requestAnimationFrame(r));
        const rows = [...document.querySelectorAll('[data-testid^="job-row-"]')];
        if (rows.length && rows.every(held)) return [Math.round(performance.now() - t0), t0];
        if (performance.now() - t0 > timeout) return [null, t0];
      }
    },
    { timeout: STEP_TIMEOUT },
  );
  [result.filterMs, mark] = filtered;
  result.filterApiMs = await listJobsTime(mark);
  log('filter:', result.filterMs, 'ms (ListJobs', result.filterApiMs, 'ms)');

  // --- scroll: back to all jobs, then a scripted scroll ---
  await page.goto(`${BASE()}/t/demo/jobs`);
  await page.waitForFunction(() => window.__bench.firstRow !== null, undefined, { timeout: 30_000 });
  await sleep(1000);
  const scroll = await page.evaluate(async () => {
    const el = document.querySelector('[data-testid="jobs-table"]');
    const tasksBefore = window.__bench.longTasks.length;
    const deltas = [];
    let last = await new Promise((r) => requestAnimationFrame(r));
    const t0 = last;
    while (last - t0 < 4000) {
      el.scrollTop += 400;
      const now = await new Promise((r) => requestAnimationFrame(r));
      deltas.push(now - last);
      last = now;
    }
    // The frames over 20 ms: [index, ms].
    const slow = deltas.map((d, i) => [i, Math.round(d * 10) / 10]).filter(([, d]) => d > 20);
    return {
      frames: deltas.length,
      slow,
      maxFrame: Math.max(...deltas),
      p95: deltas.sort((a, b) => a - b)[Math.floor(deltas.length * 0.95)],
      longTasks: window.__bench.longTasks.slice(tasksBefore).map(([, d]) => Math.round(d)),
      scrolledPx: el.scrollTop,
      rowsLoaded: document.querySelector('[data-testid="selection-count"]')?.textContent ?? '',
    };
  });
  result.scrollMaxFrameMs = Math.round(scroll.maxFrame * 10) / 10;
  result.scrollP95FrameMs = Math.round(scroll.p95 * 10) / 10;
  result.scrollFrames = scroll.frames;
  result.scrollSlowFrames = scroll.slow;
  result.scrollLongTasks = scroll.longTasks;
  result.scrolledPx = scroll.scrolledPx;
  result.rowsLoadedAfterScroll = scroll.rowsLoaded;
  result.chromium = browser.version();

  // After the scroll the rows' elements are reused out of order in the DOM (JobsGrid keys them
  // by slot); the Tab key still goes through the rows in the table's order (CSS reading-order).
  const tabRows = [];
  await page.evaluate(() => {
    const rows = [...document.querySelectorAll('.jgrid-body [role="row"]')];
    rows.sort((a, b) => Number(a.getAttribute('aria-rowindex')) - Number(b.getAttribute('aria-rowindex')));
    rows[0]?.querySelector('input')?.focus();
  });
  for (let i = 0; i < 8; i++) {
    tabRows.push(await page.evaluate(() => Number(document.activeElement?.closest('[role="row"]')?.getAttribute('aria-rowindex'))));
    await page.keyboard.press('Tab');
  }
  // Two stops a row (checkbox, link): 8 presses visit 4 consecutive rows.
  result.tabRowIndexes = tabRows;
  const tabInOrder = tabRows.every((r, i) => r === tabRows[0] + Math.floor(i / 2));

  const broken = [];
  // Frame gaps are whole vsyncs give or take 0.2 ms: three (50 ms) meet the scroll's limit.
  const tolerance = { scrollMaxFrameMs: 0.5 };
  for (const [k, limit] of Object.entries(LIMITS)) {
    if (result[k] === null || result[k] === undefined || result[k] > limit + (tolerance[k] ?? 0)) broken.push(`${k} ${result[k]} > ${limit}`);
  }
  if (!tabInOrder) broken.push(`Tab after the scroll visits rows ${tabRows.join(', ')}, not in order`);
  result.limits = LIMITS;
  result.broken = broken;
  console.log(`BENCH_JSON ${JSON.stringify(result)}`);
  if (broken.length) throw new Error(`limits broken: ${broken.join(', ')}`);
});
