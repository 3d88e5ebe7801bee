// Scenario 2: submit through the form. A value the form checks itself (0 workers) and one only
// the server refuses (0 CPU) each show their error next to their field and create nothing; a
// good submit lands on the new job's page and the REST API has the job as entered.
import { api, apiOk, check, checkEq, env, jobId, log, newPage, scenario, settle, shot, signIn, visit } from './lib.mjs';

await scenario('submit', async (browser) => {
  const token = env('E2E_TOKEN_DEMO');
  const listed = async () => (await apiOk(token, 'GET', 'tenants/demo/jobs?pageSize=1000')).jobs ?? [];
  const before = await listed();
  const page = await newPage(browser);
  await signIn(page, token);
  await visit(page, '/t/demo/submit');
  await page.getByTestId('submit-queue').locator('option[value="tiny"]').waitFor({ state: 'attached' });

  const name = `e2e-form-job-${Date.now()}`;
  await page.getByTestId('submit-name').fill(name);
  await page.getByTestId('submit-project').fill('default');
  await page.getByTestId('submit-queue').selectOption('tiny');
  await page.getByTestId('submit-jobSet').fill('form-set');
  await page.getByTestId('submit-labels').fill('origin=form');
  await page.getByTestId('submit-command').fill('python3 train.py');
  await page.getByTestId('submit-gpus').fill('1');
  await page.getByTestId('submit-gpuModel').selectOption('H100');
  await page.getByTestId('submit-memory').fill('16Gi');

  // 0 workers: refused by the form itself, next to the field.
  await page.getByTestId('submit-workers').fill('0');
  await page.getByTestId('submit-cpus').fill('4');
  await page.getByTestId('submit-job').click();
  await page.getByTestId('error-workers').waitFor();
  log('0 workers:', await page.getByTestId('error-workers').innerText());
  checkEq(await page.getByTestId('submit-workers').getAttribute('aria-invalid'), 'true', 'workers marked invalid');
  check(
    (await page.getByTestId('submit-workers').getAttribute('aria-describedby'))?.includes('f-workers-err'),
    'the workers error is not tied to its field (aria-describedby)',
  );
  await page.getByTestId('submit-workers').fill('1');

  // 0 CPU: the form sends it; the server's error (the same the REST API gives) is shown next
  // to the CPU field.
  await page.getByTestId('submit-cpus').fill('0');
  const oracle = await api(token, 'POST', 'tenants/demo/jobs', {
    job: {
      displayName: name,
      spec: { project: 'default', queue: 'tiny', workers: 1, command: ['python3'], resources: { gpus: 1, cpuMillis: '0', memoryBytes: '17179869184' } },
    },
    clientRequestId: `oracle-${Date.now()}`,
  });
  checkEq(oracle.status, 400, 'REST answer to 0 CPU');
  checkEq(oracle.body.error.field, 'job.spec.resources.cpu_millis', 'REST error field for 0 CPU');
  await page.getByTestId('submit-job').click();
  await page.getByTestId('error-cpus').waitFor();
  const cpuError = await page.getByTestId('error-cpus').innerText();
  log('0 CPU, shown:', cpuError, '| REST:', oracle.body.error.message);
  checkEq(cpuError, oracle.body.error.message, 'the CPU field shows the server message');
  checkEq(await page.getByTestId('submit-cpus').getAttribute('aria-invalid'), 'true', 'CPU marked invalid');
  check(await page.getByTestId('submit-cpus').evaluate((e) => e === document.activeElement), 'focus not on the CPU field');
  checkEq(new URL(page.url()).pathname, '/t/demo/submit', 'still on the form');
  await shot(page, 'submit-error');
  checkEq((await listed()).length, before.length, 'jobs after refused submits');

  // The good submit.
  await page.getByTestId('submit-cpus').fill('4');
  check((await page.getByTestId('error-cpus').count()) === 0, 'the CPU error stays after editing the field');
  await page.getByTestId('submit-job').click();
  await page.waitForURL((u) => /^\/t\/demo\/jobs\/\d+$/.test(u.pathname), { timeout: 15_000 });
  const id = new URL(page.url()).pathname.split('/').pop();
  await settle(page);
  const job = await apiOk(token, 'GET', `tenants/demo/jobs/${id}?view=JOB_VIEW_FULL`);
  checkEq(job.displayName, name, 'display name');
  checkEq(job.spec.queue, 'tiny', 'queue');
  checkEq(job.spec.project, 'default', 'project');
  checkEq(job.spec.jobSet, 'form-set', 'job set');
  checkEq(job.spec.workers, 1, 'workers');
  checkEq(job.spec.resources.gpus, 1, 'gpus');
  checkEq(job.spec.resources.gpuModel, 'H100', 'gpu model');
  checkEq(String(job.spec.resources.cpuMillis), '4000', 'cpu millis');
  checkEq(String(job.spec.resources.memoryBytes), String(16 * 1024 ** 3), 'memory bytes');
  checkEq(JSON.stringify(job.spec.command), JSON.stringify(['/bin/sh', '-c', 'python3 train.py']), 'command');
  checkEq(job.labels?.origin, 'form', 'label origin');
  checkEq(job.creator, 'users/demo', 'creator');
  const after = await listed();
  checkEq(after.length, before.length + 1, 'jobs after the good submit');
  check(after.some((j) => jobId(j.name) === id), 'the new job is not in ListJobs');
  await page.getByRole('heading', { level: 1 }).filter({ hasText: name }).waitFor();
  await shot(page, 'job-submitted');

  // It is in the jobs table too.
  await visit(page, '/t/demo/jobs');
  await page.getByTestId(`job-row-${id}`).waitFor();
  check((await page.getByTestId(`job-row-${id}`).innerText()).includes(name), 'jobs table row lacks the name');
  check(page.e2e.pageErrors.length === 0, `page errors: ${page.e2e.pageErrors.join('; ')}`);
});
