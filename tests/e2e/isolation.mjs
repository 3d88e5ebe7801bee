// Scenario 7: a viewer of tenant demo never sees tenant rival. Every page of demo, and every
// page of rival asked for by URL, is visited; the rival job's name, its queue and its project
// never appear in the DOM or in any API answer, and no request for a rival URL succeeds.
import { BASE, apiOk, check, checkEq, env, jobId, log, newPage, scenario, settle, shot, signIn } from './lib.mjs';

await scenario('isolation', async (browser) => {
  const token = env('E2E_TOKEN_VIEWER');
  const rivalJob = env('E2E_RIVAL_JOB');
  const secrets = [env('E2E_RIVAL_JOB_NAME'), 'rivalq', 'secretproj', 'users/rex'];
  // The rival job exists (its owner sees it), so not seeing it means something.
  const seen = await apiOk(env('E2E_TOKEN_RIVAL'), 'GET', `${rivalJob}`);
  checkEq(seen.displayName, secrets[0], 'the rival job, as its owner sees it');
  const demoJobs = (await apiOk(token, 'GET', 'tenants/demo/jobs?pageSize=5')).jobs ?? [];
  check(demoJobs.length > 0, 'demo has no job to open');

  const page = await newPage(browser);
  const leaks = [];
  const rivalRequests = [];
  page.on('response', async (r) => {
    const url = new URL(r.url());
    if (!url.pathname.startsWith('/v1/')) return;
    if (/rival/.test(decodeURIComponent(url.pathname + url.search))) rivalRequests.push(`${r.status()} ${url.pathname}`);
    if (/rival/.test(decodeURIComponent(url.pathname + url.search)) && r.status() < 400) leaks.push(`${r.status()} ${url.pathname}`);
    if ((r.headers()['content-type'] ?? '').includes('event-stream')) return;
    try {
      const body = await r.text();
      for (const s of secrets) if (body.includes(s)) leaks.push(`${url.pathname} answered "${s}"`);
    } catch {
      // body gone (navigation)
    }
  });
  await signIn(page, token);
  const pages = [
    '/',
    '/t/demo/jobs',
    `/t/demo/jobs/${jobId(demoJobs[0].name)}`,
    '/t/demo/queues',
    '/t/demo/clusters',
    '/t/demo/costs',
    '/t/demo/submit',
    '/t/rival/jobs',
    `/t/rival/jobs/${jobId(rivalJob)}`,
    '/t/rival/queues',
    '/t/rival/clusters',
    '/t/rival/costs',
    '/t/rival/submit',
    '/t/-/jobs',
  ];
  for (const path of pages) {
    await page.goto(`${BASE()}${path}`);
    await settle(page);
    await page.waitForTimeout(300);
    const html = await page.content();
    const text = await page.locator('body').innerText();
    for (const s of secrets) {
      check(!html.includes(s), `${path}: the DOM holds "${s}"`);
    }
    const options = await page.getByTestId('tenant-switcher').locator('option').allInnerTexts().catch(() => []);
    // On a rival URL the switcher shows the tenant of the URL (what the user typed); elsewhere
    // it must not know rival.
    if (!path.startsWith('/t/rival/')) check(!options.includes('rival'), `${path}: the tenant switcher offers rival`);
    log(`${path}: ok (${text.length} chars of text)`);
    if (path === `/t/rival/jobs/${jobId(rivalJob)}`) await shot(page, 'isolation-rival-job');
  }
  log('requests naming rival:', rivalRequests.join(', ') || 'none');
  check(rivalRequests.length > 0, 'the rival pages made no request at all (nothing was tested)');
  check(leaks.length === 0, `leaks: ${leaks.join('; ')}`);
  check(page.e2e.pageErrors.length === 0, `page errors: ${page.e2e.pageErrors.join('; ')}`);
});
