// A job's page follows a preemption by priority and the resume live. A resumable job of the
// tenant's default class (value 0, preemptible) fills queue preemptq (8 GPUs of quota, which
// preempts lower priority within itself) and checkpoints; a job of class "high" (100) arrives
// in the same queue. The open page, never reloaded, shows attempt 1 ended by the preemption and
// attempt 2 resumed from the checkpoint the REST API names, after the high job ran.
import { apiOk, axe, check, checkEq, env, jobId, log, newPage, scenario, settle, shot, signIn, submit, visit, waitFor } from './lib.mjs';

await scenario('preempt', async (browser) => {
  const token = env('E2E_TOKEN_DEMO');
  const shape = { queue: 'preemptq', gpus: 8, cpuMillis: 8000 };
  const low = jobId(
    (
      await submit(token, 'demo', {
        ...shape,
        name: 'e2e-preempt-low',
        duration: '20s',
        checkpoint: { resumable: true, interval: '2s', gracePeriod: '1s' },
      })
    ).name,
  );
  const get = (id) => apiOk(token, 'GET', `tenants/demo/jobs/${id}?view=JOB_VIEW_FULL`);
  await waitFor(async () => (await get(low)).state === 'JOB_STATE_RUNNING', { timeout: 30_000, what: `job ${low} running` });
  await waitFor(async () => ((await apiOk(token, 'GET', `tenants/demo/jobs/${low}/checkpoints`)).checkpoints ?? []).length > 0, {
    timeout: 20_000,
    what: `a checkpoint of job ${low}`,
  });

  const page = await newPage(browser);
  await signIn(page, token);
  await visit(page, `/t/demo/jobs/${low}`);
  await page.getByTestId('attempts').waitFor();
  checkEq(await page.getByTestId('attempts').locator('tbody tr').count(), 1, 'attempt rows before the preemption');
  await page.evaluate(() => {
    window.__e2eNoReload = true;
  });

  const high = jobId((await submit(token, 'demo', { ...shape, name: 'e2e-preempt-high', priorityClass: 'high', duration: '4s' })).name);
  log(`job ${high} (class high) submitted into the queue job ${low} fills`);

  // The page shows attempt 1 preempted and attempt 2 resumed from the checkpoint, no reload.
  const rows = page.getByTestId('attempts').locator('tbody tr');
  await waitFor(async () => (await rows.count()) >= 2 && /resumed from/.test(await rows.nth(1).innerText()), {
    timeout: 60_000,
    what: 'attempt 2 resumed, on the page',
  });
  const j = await get(low);
  checkEq(j.attempts[0].failureClass, 'FAILURE_CLASS_PREEMPTION', 'REST: attempt 1 failure class');
  const resumedFrom = j.attempts[1].resumedFrom;
  check(resumedFrom && resumedFrom.startsWith(`sim://ty-${low}-1/`), `REST: attempt 2 resumed from ${resumedFrom}`);
  // The preemptor ran in between: it started after attempt 1 was admitted and before attempt 2.
  const h = await get(high);
  const hStart = Date.parse(h.attempts?.[0]?.startTime ?? '');
  check(hStart > Date.parse(j.attempts[0].admitTime) && hStart <= Date.parse(j.attempts[1].startTime ?? new Date().toISOString()),
    `job ${high} started at ${h.attempts?.[0]?.startTime}, not between attempts 1 and 2 of job ${low}`);
  const row1 = await rows.nth(0).innerText();
  const row2 = await rows.nth(1).innerText();
  log('attempt 1 row:', row1.replace(/\s+/g, ' '));
  log('attempt 2 row:', row2.replace(/\s+/g, ' '));
  check(/preemption/i.test(row1) && /preempted it for other work/.test(row1), 'attempt 1 row does not say it was preempted');
  // The attempt says who took its place, as REST has it.
  check(j.attempts[0].message?.includes(`job ${high} (priority 100`), `REST: attempt 1's message: ${j.attempts[0].message}`);
  check(row1.includes(`job ${high} (priority 100`), `attempt 1 row does not name job ${high} as the preemptor`);
  check(row2.includes(`resumed from ${resumedFrom}`), `attempt 2 row does not name ${resumedFrom}`);
  const events = await page.getByTestId('job-events').innerText();
  log('events:', events.replace(/\s+/g, ' '));
  // The preemption's event names the preemptor (who took the capacity, and at what priority).
  check(new RegExp(`job ${high} \\(priority 100`).test(events), `the events list does not name job ${high} as the preemptor: ${events}`);
  check(await page.evaluate(() => window.__e2eNoReload === true), 'the page was reloaded');
  await shot(page, 'job-preempted');

  await waitFor(async () => (await get(low)).state === 'JOB_STATE_SUCCEEDED', { timeout: 90_000, what: `job ${low} succeeded` });
  await page.getByRole('heading', { level: 1 }).filter({ hasText: /succeeded/i }).waitFor({ timeout: 15_000 });
  checkEq((await get(high)).state, 'JOB_STATE_SUCCEEDED', `job ${high} state`);

  // Logs: the panel follows the newest attempt until its output is complete, and shows any
  // attempt's (the sim's output of an attempt is its own events, one line each).
  const logs = page.getByTestId('job-logs');
  await waitFor(async () => new RegExp(`SUCCEEDED ty-${low}-2\\b`).test(await logs.innerText()), {
    timeout: 20_000,
    what: `attempt 2's output up to its end, on the page`,
  });
  const shown2 = await logs.innerText();
  check(new RegExp(`STARTED ty-${low}-2\\b`).test(shown2), `attempt 2's output: ${shown2}`);
  const rest2 = await apiOk(token, 'GET', `tenants/demo/jobs/${low}/logs?attempt=2`);
  check(rest2.complete === true, 'REST: attempt 2 output complete');
  checkEq(shown2.trimEnd(), rest2.text.trimEnd(), 'attempt 2 output, page against REST');
  await page.getByTestId('logs-attempt').selectOption('1');
  await waitFor(async () => new RegExp(`CANCELLED ty-${low}-1 PREEMPTED`).test(await logs.innerText()), {
    timeout: 10_000,
    what: `attempt 1's output, ending preempted`,
  });
  const shown1 = await logs.innerText();
  log('attempt 1 output:', shown1.replace(/\n/g, ' | '));
  for (const what of [`STARTED ty-${low}-1`, `CHECKPOINT ty-${low}-1 sim://ty-${low}-1/step-`, `STOP_REQUESTED ty-${low}-1 grace=1s reason=preemption`]) {
    check(shown1.includes(what), `attempt 1's output lacks "${what}": ${shown1}`);
  }
  await page.getByRole('heading', { name: 'Logs' }).scrollIntoViewIfNeeded();
  await shot(page, 'job-logs');
  await axe(page, 'job page with logs');
  await settle(page);
  check(page.e2e.pageErrors.length === 0, `page errors: ${page.e2e.pageErrors.join('; ')}`);
});
