// Scenario 6: the costs page's CSV download (finance token) agrees with GetReport. The CSV
// (FOCUS columns) is read from the browser's download; its billed, list and lost-work costs
// and attempts, summed over its rows, equal the report total that GET /v1/tenants/demo/report
// gives for the very window and grouping the page asked for.
import { readFileSync } from 'node:fs';
import { apiOk, check, checkEq, env, log, newPage, scenario, shot, signIn, submit, visit, waitFor } from './lib.mjs';

/** "12.345678" -> 12345678n micros, exactly (no floating point). */
function micros(decimal) {
  const m = /^(-?)(\d+)(?:\.(\d{1,6}))?$/.exec(decimal.trim());
  if (!m) throw new Error(`not a decimal amount: ${JSON.stringify(decimal)}`);
  const v = BigInt(m[2]) * 1_000_000n + BigInt((m[3] ?? '').padEnd(6, '0'));
  return m[1] ? -v : v;
}

/** 265305 micros -> "0.27": whole units with thousands separators and cents rounded half up. */
function centsText(micros) {
  const cents = (BigInt(micros) + 5_000n) / 10_000n;
  const whole = (cents / 100n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  return `${whole}.${(cents % 100n).toString().padStart(2, '0')}`;
}

/** RFC 4180 CSV: rows of fields (quoted fields may hold commas, quotes and newlines). */
function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') {
      row.push(field);
      field = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
    } else field += c;
  }
  if (field || row.length) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

await scenario('costs', async (browser) => {
  const token = env('E2E_TOKEN_FINANCE');
  // A short job of its own (the meter runs a pass a second), so that the ledger has cost to
  // show and download whatever ran before; wait until it is there (up to a minute).
  await submit(env('E2E_TOKEN_DEMO'), 'demo', { name: 'e2e-costs', duration: '3s' });
  const now = Math.floor(Date.now() / 3600e3) * 3600e3;  // reports split at whole UTC hours
  const window = new URLSearchParams({
    startTime: new Date(now - 40 * 86400e3).toISOString(),
    endTime: new Date(now + 86400e3).toISOString(),
  });
  for (let i = 0; ; i++) {
    const r = await apiOk(token, 'GET', `tenants/demo/report?${window}`);
    if (BigInt(r.total?.cost?.micros ?? 0) > 0n) break;
    check(i < 60, `nothing metered after a minute: ${JSON.stringify(r.total)}`);
    await new Promise((res) => setTimeout(res, 1000));
  }
  const page = await newPage(browser);
  await signIn(page, token);
  await visit(page, '/t/demo/costs');
  await page.getByTestId('cost-totals').waitFor();
  await shot(page, 'costs');

  let exportBody;
  page.on('request', (r) => {
    if (r.url().endsWith('/v1/tenants/demo/report:export')) exportBody = r.postDataJSON();
  });
  const reportFor = (req) => {
    const q = new URLSearchParams({ startTime: req.startTime, endTime: req.endTime, step: req.step });
    for (const g of req.groupBy ?? []) q.append('groupBy', g);
    return apiOk(token, 'GET', `tenants/demo/report?${q}`);
  };
  const download = async () => {
    const [d] = await Promise.all([page.waitForEvent('download'), page.getByTestId('download-csv').click()]);
    check(/\.csv$/.test(d.suggestedFilename()), `file name ${d.suggestedFilename()}`);
    const text = readFileSync(await d.path(), 'utf8');
    check(exportBody?.format === 'REPORT_FORMAT_CSV', `export request: ${JSON.stringify(exportBody)}`);
    return text;
  };
  // Costs keep accruing while a demo job runs: the download is bracketed by two reports for the
  // page's window, and taken again until nothing changed around it. (The first download tells
  // the window.)
  let csv = await download();
  let report;
  for (let attempt = 1; ; attempt++) {
    const before = await reportFor(exportBody.report);
    csv = await download();
    report = await reportFor(exportBody.report);
    if (JSON.stringify(before.total) === JSON.stringify(report.total)) break;
    check(attempt < 10, 'the report never held still (a demo job keeps running)');
    await new Promise((res) => setTimeout(res, 1000));
  }
  log(`downloaded ${csv.length} bytes for ${exportBody.report.startTime} .. ${exportBody.report.endTime}`);
  const rows = parseCsv(csv);
  const header = rows.shift();
  const col = (name) => {
    const i = header.indexOf(name);
    check(i >= 0, `CSV has no ${name} column: ${header.join(',')}`);
    return i;
  };
  const data = rows.filter((r) => r.length > 1);
  check(data.length > 0, 'the CSV has no rows');
  const sum = (name) => data.reduce((a, r) => a + micros(r[col(name)] || '0'), 0n);
  const total = report.total;
  check(BigInt(total.cost.micros ?? 0) > 0n, `nothing was metered: ${JSON.stringify(total)}`);
  checkEq(sum('BilledCost'), BigInt(total.cost.micros ?? 0), 'CSV BilledCost sum vs report total cost (micros)');
  checkEq(sum('ListCost'), BigInt(total.listCost?.micros ?? 0), 'CSV ListCost sum vs report total list cost (micros)');
  checkEq(sum('x_LostWorkCost'), BigInt(total.lostWorkCost?.micros ?? 0), 'CSV x_LostWorkCost sum vs report lost work (micros)');
  checkEq(
    data.reduce((a, r) => a + BigInt(r[col('x_Attempts')] || '0'), 0n),
    BigInt(total.attempts ?? 0),
    'CSV x_Attempts sum vs report attempts',
  );
  for (const r of data) checkEq(r[col('BillingCurrency')], report.currency, 'currency');
  // One CSV row per report row (project x day).
  checkEq(data.length, (report.rows ?? []).length, 'CSV rows vs report rows');
  log(`CSV total ${sum('BilledCost')} micros = report total ${total.cost.micros} micros over ${data.length} rows`);
  // The page's totals show the report's amount, to the cent (half up, like the page). The page
  // loaded its report before the download: reload it until it and the report agree on a total
  // that holds still (a job still metering moves it).
  for (let attempt = 1; ; attempt++) {
    await visit(page, '/t/demo/costs');
    const shown = (await page.getByTestId('cost-totals').innerText()).replace(/\s+/g, ' ');
    const a = await reportFor(exportBody.report);
    const b = await reportFor(exportBody.report);
    const cents = centsText(a.total?.cost?.micros ?? '0');
    if (a.total?.cost?.micros === b.total?.cost?.micros && shown.includes(cents)) {
      log(`page totals show ${cents} = report total ${a.total?.cost?.micros} micros`);
      break;
    }
    check(attempt < 5, `page totals "${shown}" lack ${cents}, the report's total`);
    await new Promise((res) => setTimeout(res, 1000));
  }
  check(page.e2e.pageErrors.length === 0, `page errors: ${page.e2e.pageErrors.join('; ')}`);
});
