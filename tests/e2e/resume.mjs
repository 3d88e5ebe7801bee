// Scenario 3: a job's page follows a spot reclaim and the resume live. A resumable job runs on
// a spot node; `trainyard sim-fault reclaim-node` takes the node; the open page, never
// reloaded, shows attempt 1 ended by the reclaim and attempt 2 resumed from the checkpoint the
// REST API names.
import { execFileSync } from 'node:child_process';
import { apiOk, check, checkEq, env, jobId, log, newPage, scenario, settle, shot, signIn, submit, visit, waitFor } from './lib.mjs';

await scenario('resume', async (browser) => {
  const token = env('E2E_TOKEN_DEMO');
  const job = await submit(token, 'demo', {
    name: 'e2e-spot-resume',
    queue: 'default',
    gpus: 8,
    cpuMillis: 8000,
    duration: '20s',
    checkpoint: { resumable: true, interval: '2s', gracePeriod: '1s' },
  });
  const id = jobId(job.name);
  const get = () => apiOk(token, 'GET', `tenants/demo/jobs/${id}?view=JOB_VIEW_FULL`);
  // Resumable jobs may use spot; wait until it runs and has checkpointed, on a spot node.
  const running = await waitFor(
    async () => {
      const j = await get();
      return j.state === 'JOB_STATE_RUNNING' && j.attempts?.length === 1 ? j : null;
    },
    { timeout: 30_000, what: `job ${id} running` },
  );
  const att = running.attempts[0];
  const node = String(att.placements?.[0]?.node ?? '').split('/').pop();
  log(`job ${id} runs on ${node} (${att.flavor})`);
  check(/spot/.test(att.flavor ?? ''), `job ${id} is not on spot capacity: ${att.flavor}`);

  const page = await newPage(browser);
  await signIn(page, token);
  await visit(page, `/t/demo/jobs/${id}`);
  await page.getByTestId('attempts').waitFor();
  checkEq(await page.getByTestId('attempts').locator('tbody tr').count(), 1, 'attempt rows before the reclaim');
  await page.evaluate(() => {
    window.__e2eNoReload = true;
  });
  await waitFor(async () => ((await apiOk(token, 'GET', `tenants/demo/jobs/${id}/checkpoints`)).checkpoints ?? []).length > 0, {
    timeout: 20_000,
    what: 'a checkpoint',
  });
  await shot(page, 'job-running');

  execFileSync(env('E2E_TRAINYARD_BIN'), ['sim-fault', `--sim_target=${env('E2E_SIM_TARGET')}`, 'reclaim-node', node], {
    stdio: 'inherit',
  });
  log(`reclaimed ${node}`);

  // The page shows attempt 2 resumed from the checkpoint, without a reload.
  const rows = page.getByTestId('attempts').locator('tbody tr');
  await waitFor(async () => (await rows.count()) >= 2 && /resumed from/.test(await rows.nth(1).innerText()), {
    timeout: 60_000,
    what: 'attempt 2 resumed, on the page',
  });
  const j = await get();
  check(j.attempts.length >= 2, 'REST: no second attempt');
  checkEq(j.attempts[0].failureClass, 'FAILURE_CLASS_SPOT_RECLAIM', 'REST: attempt 1 failure class');
  const resumedFrom = j.attempts[1].resumedFrom;
  check(resumedFrom && resumedFrom.startsWith(`sim://ty-${id}-1/`), `REST: attempt 2 resumed from ${resumedFrom}`);
  const row1 = await rows.nth(0).innerText();
  const row2 = await rows.nth(1).innerText();
  log('attempt 1 row:', row1.replace(/\s+/g, ' '));
  log('attempt 2 row:', row2.replace(/\s+/g, ' '));
  check(/spot reclaim/i.test(row1), 'attempt 1 row does not say spot reclaim');
  check(row2.includes(`resumed from ${resumedFrom}`), `attempt 2 row does not name ${resumedFrom}`);
  check(/attempt 2/.test(await page.getByTestId('attempt-timeline').innerText()), 'timeline lacks attempt 2');
  check(await page.evaluate(() => window.__e2eNoReload === true), 'the page was reloaded');
  const events = await page.getByTestId('job-events').innerText();
  check(events.split('\n').length >= 3, `events list: ${events}`);
  await shot(page, 'job-resumed');

  // It ends: the page shows it succeeded (REST agrees), still without a reload.
  await waitFor(async () => (await get()).state === 'JOB_STATE_SUCCEEDED', { timeout: 90_000, what: `job ${id} succeeded` });
  await page.getByRole('heading', { level: 1 }).filter({ hasText: /succeeded/i }).waitFor({ timeout: 15_000 });
  check(await page.evaluate(() => window.__e2eNoReload === true), 'the page was reloaded');
  await settle(page);
  await shot(page, 'job-succeeded');
  check(page.e2e.pageErrors.length === 0, `page errors: ${page.e2e.pageErrors.join('; ')}`);
});
