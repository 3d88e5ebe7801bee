// Shared helpers of the console's browser scenarios (run by test_console.py, one process per
// scenario): the browser, sign-in, the REST API as an independent oracle, screenshots, checks.
//
// Environment (set by test_console.py from e2e_stack.py): E2E_BASE_URL, E2E_TOKEN_DEMO,
// E2E_TOKEN_VIEWER, E2E_TOKEN_FINANCE, E2E_TOKEN_ADMIN, E2E_TOKEN_RIVAL, E2E_RIVAL_JOB,
// E2E_RIVAL_JOB_NAME, E2E_TRAINYARD_BIN, E2E_SIM_TARGET; E2E_SCREENSHOTS (default
// tests/e2e/screenshots); E2E_CHROMIUM (default /usr/bin/chromium).
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { chromium } from 'playwright-core';

const HERE = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

export function env(name, fallback) {
  const v = process.env[name];
  if (v === undefined || v === '') {
    if (fallback !== undefined) return fallback;
    throw new Error(`${name} is not set (run the scenarios through tests/e2e/test_console.py)`);
  }
  return v;
}

export const BASE = () => env('E2E_BASE_URL');
export const SHOTS = resolve(process.env.E2E_SCREENSHOTS || join(HERE, 'screenshots'));

export class CheckError extends Error {}

/** Fails the scenario with `msg` unless `cond`. */
export function check(cond, msg) {
  if (!cond) throw new CheckError(msg);
}
export function checkEq(actual, expected, msg) {
  if (actual !== expected) {
    const text = (v) => JSON.stringify(v, (_, x) => (typeof x === 'bigint' ? `${x}n` : x));
    throw new CheckError(`${msg}: expected ${text(expected)}, got ${text(actual)}`);
  }
}

export function log(...args) {
  console.log(`[${new Date().toISOString().slice(11, 23)}]`, ...args);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls fn() until it returns a truthy value; returns it, or fails naming `what`. */
export async function waitFor(fn, { timeout = 30_000, interval = 250, what = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new CheckError(`timed out after ${timeout} ms waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    }
    await sleep(interval);
  }
}

/** One REST call of the gateway with `token`: {status, body} (JSON parsed, else text). */
export async function api(token, method, path, body) {
  const headers = { Accept: 'application/json', Authorization: `Bearer ${token}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`${BASE()}/v1/${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed = text;
  if ((res.headers.get('content-type') || '').includes('json')) parsed = text ? JSON.parse(text) : {};
  return { status: res.status, body: parsed };
}

/** api() that fails unless the answer is 200; returns the body. */
export async function apiOk(token, method, path, body) {
  const r = await api(token, method, path, body);
  if (r.status !== 200) throw new CheckError(`${method} /v1/${path}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** A job spec for REST submits (sim backend: SIM_DURATION sets how long it runs). */
export function jobBody(o = {}) {
  return {
    displayName: o.name ?? 'e2e-job',
    labels: o.labels ?? {},
    spec: {
      project: o.project ?? 'default',
      queue: o.queue ?? 'tiny',
      priorityClass: o.priorityClass ?? '',
      workers: o.workers ?? 1,
      jobSet: o.jobSet ?? '',
      resources: {
        gpus: o.gpus ?? 1,
        gpuModel: 'H100',
        cpuMillis: String(o.cpuMillis ?? 4000),
        memoryBytes: String(o.memoryBytes ?? 17179869184),
      },
      command: ['python3', 'train.py'],
      env: { SIM_DURATION: o.duration ?? '600s' },
      ...(o.checkpoint ? { checkpoint: o.checkpoint } : {}),
    },
  };
}

let requestSeq = 0;
export async function submit(token, tenant, o) {
  const id = `e2e-${process.pid}-${Date.now()}-${requestSeq++}`;
  const r = await apiOk(token, 'POST', `tenants/${tenant}/jobs`, { job: jobBody(o), clientRequestId: id });
  return r.job;
}

export const jobId = (name) => String(name).split('/').pop();

export async function launch() {
  return chromium.launch({
    executablePath: env('E2E_CHROMIUM', '/usr/bin/chromium'),
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

/**
 * A fresh context and page (1280x800) in `theme`; records page errors and any dialog (an
 * alert() would be a script injection) on page.e2e.
 */
export async function newPage(browser, { theme = 'light', viewport = { width: 1280, height: 800 } } = {}) {
  const context = await browser.newContext({ viewport, colorScheme: theme, acceptDownloads: true });
  await context.addInitScript((t) => {
    try {
      localStorage.setItem('trainyard.theme', t);
    } catch {
      // no storage
    }
  }, theme);
  const page = await context.newPage();
  page.e2e = { dialogs: [], pageErrors: [], theme };
  page.on('dialog', (d) => {
    page.e2e.dialogs.push(`${d.type()}: ${d.message()}`);
    void d.dismiss().catch(() => {});
  });
  page.on('pageerror', (e) => page.e2e.pageErrors.push(String(e)));
  return page;
}

/** Signs in through the form and waits until the app left /signin. */
export async function signIn(page, token) {
  await page.goto(`${BASE()}/signin`);
  await page.getByTestId('token-input').fill(token);
  await page.getByTestId('sign-in').click();
  await page.waitForURL((u) => !u.pathname.startsWith('/signin'), { timeout: 15_000 });
  await page.getByTestId('principal').waitFor();
}

/** Goes to a console path and waits for the page's loading placeholders to go. */
export async function visit(page, path) {
  await page.goto(`${BASE()}${path}`);
  await settle(page);
}

/** Waits until no "Loading…" status is shown (the page's queries answered). */
export async function settle(page, timeout = 20_000) {
  await page.waitForLoadState('domcontentloaded');
  await page
    .waitForFunction(
      () => ![...document.querySelectorAll('.state-loading')].some((e) => e.offsetParent !== null),
      undefined,
      { timeout },
    )
    .catch(() => {});
}

export async function shot(page, name) {
  mkdirSync(SHOTS, { recursive: true });
  const file = join(SHOTS, `${name}-${page.e2e?.theme ?? 'light'}.png`);
  await page.screenshot({ path: file });
  return file;
}

/** axe-core on the page: violations of impact serious or critical (others are logged). */
export async function axe(page, label) {
  const already = await page.evaluate(() => typeof window.axe !== 'undefined');
  // Evaluated through the DevTools protocol: the console's CSP (script-src 'self') refuses a
  // script tag, and the page under test stays as served.
  if (!already) await page.evaluate(readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8'));
  const result = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.slice(0, 5).map((n) => ({ target: n.target.join(' '), summary: n.failureSummary })),
      count: v.nodes.length,
    }));
  });
  const bad = result.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  for (const v of result) {
    log(`axe ${label}: ${v.impact} ${v.id} (${v.count}): ${v.help}`);
    for (const n of v.nodes) log(`    ${n.target} — ${String(n.summary).replace(/\s+/g, ' ')}`);
  }
  return bad;
}

/**
 * Runs a scenario: launches the browser, calls fn(browser), prints PASS or the failure, and
 * exits 0 or 1. Pages still open on failure get a screenshot named after the scenario.
 */
export async function scenario(name, fn) {
  const started = Date.now();
  let browser;
  let code = 0;
  try {
    browser = await launch();
    await fn(browser);
    log(`PASS ${name} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  } catch (e) {
    code = 1;
    console.error(`FAIL ${name}: ${e instanceof CheckError ? e.message : e?.stack || e}`);
    for (const ctx of browser?.contexts() ?? []) {
      for (const [i, p] of ctx.pages().entries()) {
        try {
          mkdirSync(SHOTS, { recursive: true });
          const f = join(SHOTS, `FAILED-${name}-${i}.png`);
          await p.screenshot({ path: f });
          console.error(`  screenshot of ${p.url()}: ${f}`);
        } catch {
          // page gone
        }
      }
    }
  } finally {
    await browser?.close().catch(() => {});
  }
  process.exit(code);
}

// The jobs page freezes on a trusted click or key press while its table has rows (React's
// commit never returns; see docs/console.md, "Tests"). Until the console is fixed, the
// scenarios act on that page with DOM events dispatched from the page itself, which React
// handles the same way (onClick, onChange), without the browser's input pipeline.

/** Clicks the element with HTMLElement.click() (a DOM click event). */
export async function jsClick(locator) {
  await locator.waitFor({ state: 'attached' });
  await locator.evaluate((el) => el.click());
}

/** Sets an input's value the way typing does (the native setter, then an input event). */
export async function jsFill(locator, value) {
  await locator.waitFor({ state: 'attached' });
  await locator.evaluate((el, v) => {
    const proto = el instanceof HTMLTextAreaElement ? HTMLTextAreaElement.prototype : HTMLInputElement.prototype;
    Object.getOwnPropertyDescriptor(proto, 'value').set.call(el, v);
    el.dispatchEvent(new Event('input', { bubbles: true }));
  }, value);
}
