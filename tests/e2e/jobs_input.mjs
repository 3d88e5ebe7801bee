// The jobs page answers real input: a trusted click on a column header sorts the table, the
// filter form's Apply (typed with the keyboard) filters it, a row's checkbox takes Space and
// its job link opens the job page.
import { apiOk, check, env, jobId, log, newPage, scenario, signIn, sleep, submit, visit } from './lib.mjs';

await scenario('jobs_input', async (browser) => {
  const token = env('E2E_TOKEN_DEMO');
  const set = `input-${Date.now()}`;
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push(jobId((await submit(token, 'demo', { name: `${set}-${i}`, jobSet: set, gpus: 2 })).name));
  try {
    await check_(browser, token, set, ids);
  } finally {
    for (const id of ids) await apiOk(token, 'POST', `tenants/demo/jobs/${id}:cancel`, { reason: 'e2e cleanup' });
  }
});

async function check_(browser, token, set, ids) {
  const page = await newPage(browser);
  await signIn(page, token);
  await visit(page, '/t/demo/jobs');
  const alive = () => Promise.race([page.evaluate(() => true), sleep(3000).then(() => false)]);
  // Idle, the page should not keep the CPU busy.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Performance.enable');
  const task = async () => (await cdp.send('Performance.getMetrics')).metrics.find((m) => m.name === 'TaskDuration').value;
  const t0 = await task();
  await sleep(2000);
  const busy = (await task()) - t0;
  log(`idle jobs page: main thread busy ${(busy * 1000).toFixed(0)} ms of 2000`);
  check(busy < 0.5, `the idle jobs page keeps the main thread busy (${(busy * 1000).toFixed(0)} ms of 2000 ms)`);

  const click = page.getByTestId('sort-name').click({ timeout: 5000 }).then(() => true, () => false);
  check(await click, 'a click on the Job column header did not complete in 5 s');
  check(await alive(), 'the page stopped answering after a click');
  await page.getByTestId('filter-jobset').pressSequentially(set, { timeout: 5000 });
  await page.getByTestId('apply-filters').click({ timeout: 5000 });
  await page.waitForURL((u) => u.searchParams.get('jobSet') === set, { timeout: 5000 });
  const rows = page.locator('[data-testid^="job-row-"]');
  const deadline = Date.now() + 5000;
  while ((await rows.count()) !== ids.length && Date.now() < deadline) await sleep(100);
  check((await rows.count()) === ids.length, `after Apply the table has ${await rows.count()} rows, not the set's ${ids.length}`);

  // A row's checkbox answers the keyboard, and its link opens the job page.
  await page.getByTestId(`select-${ids[0]}`).focus();
  await page.keyboard.press('Space');
  await page.waitForFunction(() => document.querySelector('[data-testid="selection-count"]')?.textContent === '1 selected', undefined, { timeout: 5000 });
  check(await page.getByTestId(`select-${ids[0]}`).isChecked(), `job ${ids[0]}'s checkbox is not checked after Space`);
  check(!(await page.getByTestId(`select-${ids[1]}`).isChecked()), `job ${ids[1]}'s checkbox is checked too`);
  await page.getByTestId(`job-row-${ids[0]}`).getByRole('link', { name: ids[0], exact: true }).click({ timeout: 5000 });
  await page.waitForURL((u) => u.pathname === `/t/demo/jobs/${ids[0]}`, { timeout: 5000 });
  const shown = await page
    .waitForFunction((name) => document.querySelector('h1')?.textContent?.includes(name), `${set}-0`, { timeout: 5000 })
    .then(() => true, () => false);
  check(shown, `the job page does not show job ${ids[0]} (${set}-0): ${await page.locator('h1').first().innerText()}`);
}
