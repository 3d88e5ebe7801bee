// Scenario 5: the queues page's usage bars follow admissions. The e2e queue (8 on-demand GPUs
// nominal) starts empty; two 4-GPU jobs are admitted one after the other, and the open page
// (refreshing by itself, never reloaded) shows 0, 4 and 8 GPUs used, as GetQueueStatus says.
import { apiOk, check, checkEq, env, jobId, log, newPage, scenario, shot, signIn, submit, visit, waitFor } from './lib.mjs';

await scenario('queues', async (browser) => {
  const token = env('E2E_TOKEN_DEMO');
  const gpusUsed = async () => {
    const st = await apiOk(token, 'GET', 'tenants/demo/queues/e2e:status');
    const u = (st.usage ?? []).find((x) => x.resource === 'RESOURCE_NAME_GPU' && /on-demand/.test(x.flavor));
    return Number(u?.used ?? 0);
  };
  checkEq(await gpusUsed(), 0, 'REST: GPUs used in queue e2e at the start');

  const page = await newPage(browser);
  await signIn(page, token);
  await visit(page, '/t/demo/queues');
  const bar = page.locator('[data-testid^="queue-bar-e2e-"][data-testid$="-RESOURCE_NAME_GPU"]');
  await bar.waitFor();
  const shown = async () => {
    const label = await bar.locator('.usage-bar').getAttribute('aria-label');
    const m = /(\d+) GPUs? used of (\d+) GPUs? nominal/.exec(label ?? '');
    const width = await bar.locator('.u-used').evaluate((e) => e.style.width);
    return { used: m ? Number(m[1]) : NaN, nominal: m ? Number(m[2]) : NaN, width, label };
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
  }
  check(await page.evaluate(() => window.__e2eNoReload === true), 'the page was reloaded');
  await shot(page, 'queues');
  for (const id of jobs) await apiOk(token, 'POST', `tenants/demo/jobs/${id}:cancel`, { reason: 'e2e cleanup' });
  check(page.e2e.pageErrors.length === 0, `page errors: ${page.e2e.pageErrors.join('; ')}`);
});
