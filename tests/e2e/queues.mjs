// Scenario 5: the queues page's usage bars follow admissions. The e2e queue (8 on-demand GPUs
// nominal) starts empty; two 4-GPU jobs are admitted one after the other, and the open page
// (refreshing by itself, never reloaded) shows 0, 4 and 8 GPUs used, as GetQueueStatus says.
// Between the two, e2e-borrow (no GPU quota, same cohort) borrows 2 GPUs: the only lender in
// the cohort, e2e, shows 2 GPUs lent, and none once that job is cancelled.
import { apiOk, check, checkEq, env, jobId, log, newPage, scenario, shot, signIn, submit, visit, waitFor } from './lib.mjs';

await scenario('queues', async (browser) => {
  const token = env('E2E_TOKEN_DEMO');
  const gpuUsage = async (queue = 'e2e') => {
    const st = await apiOk(token, 'GET', `tenants/demo/queues/${queue}:status`);
    return (st.usage ?? []).find((x) => x.resource === 'RESOURCE_NAME_GPU' && /on-demand/.test(x.flavor)) ?? {};
  };
  const gpusUsed = async () => Number((await gpuUsage()).used ?? 0);
  checkEq(await gpusUsed(), 0, 'REST: GPUs used in queue e2e at the start');

  const page = await newPage(browser);
  await signIn(page, token);
  await visit(page, '/t/demo/queues');
  const bar = page.getByTestId('queue-bar-e2e-on-demand-h100-RESOURCE_NAME_GPU');
  await bar.waitFor();
  const shown = async () => {
    const label = await bar.locator('.usage-bar').getAttribute('aria-label');
    const m = /(\d+) GPUs? used of (\d+) GPUs? nominal/.exec(label ?? '');
    const width = await bar.locator('.u-used').evaluate((e) => e.style.width);
    const lent = /(\d+) GPUs? lent to the cohort/.exec(label ?? '');
    const lentWidth = await bar.locator('.u-lent').evaluate((e) => e.style.width);
    return { used: m ? Number(m[1]) : NaN, nominal: m ? Number(m[2]) : NaN, lent: lent ? Number(lent[1]) : 0, width, lentWidth, label };
  };
  let s = await shown();
  log('before:', s.label);
  checkEq(s.used, 0, 'bar: GPUs used before');
  checkEq(s.nominal, 8, 'bar: nominal GPUs');
  await page.evaluate(() => {
    window.__e2eNoReload = true;
  });

  const jobs = [];
  for (const expected of [4, 8]) {
    jobs.push(jobId((await submit(token, 'demo', { name: `e2e-queue-${expected}`, queue: 'e2e', gpus: 4, duration: '900s' })).name));
    await waitFor(async () => (await gpusUsed()) === expected, { timeout: 30_000, what: `REST: ${expected} GPUs used` });
    s = await waitFor(async () => {
      const v = await shown();
      return v.used === expected ? v : null;
    }, { timeout: 25_000, what: `the bar to show ${expected} GPUs used` });
    log(`after ${jobs.length} job(s):`, s.label, 'used width', s.width);
    checkEq(s.width, `${(expected / 8) * 100}%`, `bar: used segment width at ${expected} GPUs`);
    const running = await page.getByTestId('queue-e2e').locator('dt:text-is("Running") + dd').innerText();
    checkEq(Number(running), jobs.length, 'running count on the card');
    if (expected !== 4) continue;
    // e2e-borrow borrows 2 of e2e's 4 unused GPUs.
    const borrower = jobId((await submit(token, 'demo', { name: 'e2e-borrow-2', queue: 'e2e-borrow', gpus: 2, duration: '900s' })).name);
    await waitFor(async () => Number((await gpuUsage()).lent ?? 0) === 2, { timeout: 30_000, what: 'REST: e2e lends 2 GPUs' });
    checkEq(Number((await gpuUsage('e2e-borrow')).borrowed ?? 0), 2, 'REST: e2e-borrow borrows 2 GPUs');
    s = await waitFor(async () => {
      const v = await shown();
      return v.lent === 2 ? v : null;
    }, { timeout: 25_000, what: 'the bar to show 2 GPUs lent' });
    log('lending:', s.label, 'lent width', s.lentWidth);
    checkEq(s.used, 4, 'bar: GPUs used while lending');
    checkEq(s.lentWidth, `${(2 / 8) * 100}%`, 'bar: lent segment width');
    await page.getByTestId('queue-e2e').scrollIntoViewIfNeeded();
    await shot(page, 'queues-lent');
    await apiOk(token, 'POST', `tenants/demo/jobs/${borrower}:cancel`, { reason: 'e2e: stop borrowing' });
    await waitFor(async () => Number((await gpuUsage()).lent ?? 0) === 0, { timeout: 30_000, what: 'REST: e2e lends nothing' });
    s = await waitFor(async () => {
      const v = await shown();
      return v.lent === 0 ? v : null;
    }, { timeout: 25_000, what: 'the bar to show nothing lent' });
    checkEq(s.lentWidth, '0%', 'bar: lent segment width after the borrower left');
  }
  check(await page.evaluate(() => window.__e2eNoReload === true), 'the page was reloaded');
  await shot(page, 'queues');
  for (const id of jobs) await apiOk(token, 'POST', `tenants/demo/jobs/${id}:cancel`, { reason: 'e2e cleanup' });
  check(page.e2e.pageErrors.length === 0, `page errors: ${page.e2e.pageErrors.join('; ')}`);
});
