// Scenario 8: a display name holding markup and quotes is shown as text. The job is submitted
// through the REST API with the name <script>alert(1)</script> "q" 'a' <img src=x onerror=alert(2)>;
// the jobs table, the job page (title, YAML) and the submit form's copy show those characters,
// no dialog opens, and no script or img element carrying them is in the DOM.
import { apiOk, check, checkEq, env, jobId, log, newPage, scenario, shot, signIn, submit, visit } from './lib.mjs';

const NAME = `<script>alert(1)</script> "double" 'single' <img src=x onerror=alert(2)> &amp;`;

await scenario('xss', async (browser) => {
  const token = env('E2E_TOKEN_DEMO');
  const job = await submit(token, 'demo', { name: NAME, gpus: 2 });
  const id = jobId(job.name);
  checkEq((await apiOk(token, 'GET', `tenants/demo/jobs/${id}`)).displayName, NAME, 'REST keeps the name as given');

  const page = await newPage(browser);
  await signIn(page, token);
  const injected = () =>
    page.evaluate(() => ({
      scripts: [...document.querySelectorAll('script')].filter((s) => s.textContent.includes('alert')).length,
      imgs: [...document.querySelectorAll('img')].filter((i) => (i.getAttribute('onerror') ?? '').includes('alert')).length,
      onerror: document.querySelectorAll('[onerror]').length,
    }));
  const noInjection = async (where) => {
    const r = await injected();
    checkEq(JSON.stringify(r), JSON.stringify({ scripts: 0, imgs: 0, onerror: 0 }), `${where}: injected elements`);
    checkEq(page.e2e.dialogs.length, 0, `${where}: dialogs opened (${page.e2e.dialogs.join('; ')})`);
  };

  await visit(page, `/t/demo/jobs/${id}`);
  const h1 = page.getByRole('heading', { level: 1 });
  check((await h1.innerText()).includes(NAME), `job page title: ${await h1.innerText()}`);
  check((await page.getByTestId('job-yaml').innerText()).includes('<script>alert(1)</script>'), 'the YAML lacks the name');
  await noInjection('job page');
  await shot(page, 'xss-job');

  await visit(page, `/t/demo/jobs?queue=tiny`);
  const row = page.getByTestId(`job-row-${id}`);
  await row.waitFor();
  check((await row.innerText()).includes(NAME), `jobs row: ${await row.innerText()}`);
  await noInjection('jobs table');

  await visit(page, `/t/demo/submit?from=${id}`);
  await page.getByTestId('submit-name').waitFor();
  checkEq(await page.getByTestId('submit-name').inputValue(), NAME, 'resubmit form name');
  await noInjection('resubmit form');
  // Give a late handler (an img onerror) time to fire.
  await page.waitForTimeout(500);
  checkEq(page.e2e.dialogs.length, 0, 'dialogs');
  await apiOk(token, 'POST', `tenants/demo/jobs/${id}:cancel`, { reason: 'e2e cleanup' });
  log('the name was text everywhere');
  check(page.e2e.pageErrors.length === 0, `page errors: ${page.e2e.pageErrors.join('; ')}`);
});
