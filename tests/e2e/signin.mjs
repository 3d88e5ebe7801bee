// Scenario 1: sign in with a token; a bad token shows the server's refusal, not a blank page.
import { BASE, apiOk, check, checkEq, env, log, newPage, scenario, settle, shot } from './lib.mjs';

await scenario('signin', async (browser) => {
  const token = env('E2E_TOKEN_DEMO');
  const who = await apiOk(token, 'GET', 'whoami');
  const page = await newPage(browser);

  // A protected page without a token goes to the sign-in form.
  await page.goto(`${BASE()}/t/demo/queues`);
  await page.waitForURL((u) => u.pathname === '/signin');
  await shot(page, 'signin');

  // An empty form and a wrong token: an error in an alert next to the field; still on /signin.
  await page.getByTestId('sign-in').click();
  await page.getByRole('alert').waitFor();
  check(/paste an api token/i.test(await page.getByRole('alert').innerText()), 'empty token: no "paste a token" error');
  await page.getByTestId('token-input').fill('ty_t0000000000000000_notARealTokenAtAllxxxxxxxxxxxxxxx');
  await page.getByTestId('sign-in').click();
  await page.getByText('does not accept this token').waitFor({ timeout: 10_000 });
  const alert = page.getByRole('alert');
  check((await alert.innerText()).includes('does not accept this token'), 'bad token: the alert does not say so');
  checkEq(await page.getByTestId('token-input').getAttribute('aria-invalid'), 'true', 'bad token: field not marked invalid');
  checkEq(new URL(page.url()).pathname, '/signin', 'bad token: left the sign-in page');
  check((await page.locator('body').innerText()).trim().length > 40, 'bad token: blank page');
  await shot(page, 'signin-error');
  log('bad token refused with:', await alert.innerText());

  // The good token: lands on the page asked for first, names the caller the API names.
  await page.getByTestId('token-input').fill(token);
  await page.getByTestId('sign-in').click();
  await page.waitForURL((u) => u.pathname === '/t/demo/queues', { timeout: 15_000 });
  await settle(page);
  checkEq(await page.getByTestId('principal').innerText(), who.principal, 'principal shown');
  checkEq(await page.evaluate(() => sessionStorage.getItem('trainyard.token')), token, 'token kept in sessionStorage');
  check(!page.url().includes(token), 'the token is in the URL');

  // Sign out forgets the token and goes back to the form.
  await page.getByTestId('sign-out').click();
  await page.waitForURL((u) => u.pathname === '/signin');
  checkEq(await page.evaluate(() => sessionStorage.getItem('trainyard.token')), null, 'token after sign-out');
  check(page.e2e.pageErrors.length === 0, `page errors: ${page.e2e.pageErrors.join('; ')}`);
});
