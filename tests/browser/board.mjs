// Drives the job board in headless Chromium (Debian's `chromium`, through playwright-core) against
// a running fleet: the producer at BOARD_URL, worker replicas and the simulator at SIM_URL with one
// free call per SIM_WINDOW_S window. producer/tests/board_browser.rs starts all of that and runs
// this script; it exits non-zero on the first failed check.
//
// The scenario: sign in with the API token; run A spends the window's free call; run B earns the
// 429, so the pool rests and B is delayed. The page must show the rest with a countdown that goes
// down (a screenshot is taken then), each run's attempt log, a clear that fails for the viewer
// (403) and works for the operator, and B completing after the rest.

import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

function need(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

const BASE = need('BOARD_URL');
const SIM = need('SIM_URL');
const API_TOKEN = need('API_TOKEN');
const ADMIN_TOKEN = need('ADMIN_TOKEN');
const WINDOW_MS = Number(need('SIM_WINDOW_S')) * 1000;
const FREE = need('FREE_MODEL');
const SHOT = need('SCREENSHOT');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

const step = (what) => console.log(`board test: ${what}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function http(method, url, { token = API_TOKEN, body } = {}) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  return { status: resp.status, body: text ? JSON.parse(text) : null };
}

/** Poll `check` until it returns a truthy value; fail after `ms` naming `what`. */
async function until(what, check, ms = 15000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      const v = await check();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await sleep(150);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

async function enqueue(user, input) {
  const r = await http('POST', `${BASE}/v1/runs`, {
    body: { user_id: user, input, routes: [{ model: FREE }], on_rest: 'queue' },
  });
  assert.equal(r.status, 202, `POST /v1/runs: ${JSON.stringify(r.body)}`);
  return r.body.run_id;
}

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'freeway-board-chromium-'));
const context = await chromium.launchPersistentContext(dataDir, {
  executablePath: CHROMIUM,
  headless: true,
  viewport: { width: 1400, height: 1000 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = context.pages()[0] ?? (await context.newPage());
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));
// The browser reports every 401 and 403 as a failed load; the scenario makes some on purpose.
page.on('console', (m) => {
  if (m.type() === 'error' && !/status of 40[13]/.test(m.text())) pageErrors.push(m.text());
});
const dialogs = [];
let answer = true;
page.on('dialog', async (d) => {
  dialogs.push(d.message());
  if (answer) await d.accept(); else await d.dismiss();
});

const restRow = page.locator('#rests tbody tr[data-scope="pool"][data-key="openrouter-free"]');
const runStatus = (id) => page.locator(`#runs tbody tr[data-run-id="${id}"] td.status`).getAttribute('data-status');
const remaining = async () => Number(await restRow.locator('.countdown').getAttribute('data-remaining-ms'));
const notice = async () => ((await page.isVisible('#notice')) ? page.textContent('#notice-text') : '');

async function signIn(token) {
  await page.locator('#login').waitFor({ state: 'visible' });
  await page.fill('#login-token', token);
  await page.click('#login-submit');
  await page.locator('#board').waitFor({ state: 'visible' });
}

async function openRun(id) {
  await page.click(`#runs tbody tr[data-run-id="${id}"]`);
  await until(`the detail of ${id}`, async () => (await page.textContent('#detail-id')) === id
    && (await page.locator('#detail-fields dd').count()) > 0);
}

/** The attempt log shown in the page, one object per row. */
async function attemptRows() {
  return page.$$eval('#attempts tbody tr', (rows) => rows.map((r) => {
    const c = [...r.cells].map((td) => td.textContent);
    return { n: c[0], step: c[1], route: c[2], http: c[3], verdict: c[4], latency: c[5], retry: c[6],
      left: c[7], provider: c[8], error: c[9] };
  }));
}

let failed = false;
try {
  step('the page asks for a token and refuses a wrong one');
  await page.goto(`${BASE}/board`);
  await page.locator('#login').waitFor({ state: 'visible' });
  await page.fill('#login-token', 'not-the-token');
  await page.click('#login-submit');
  await until('the refusal', async () => (await page.textContent('#login-error')).includes('401'));
  await signIn(API_TOKEN);
  await until('the viewer role', async () => /viewer/.test(await page.textContent('#role')));

  step('both workers show with a recent heartbeat');
  await until('two live workers', async () => (await page.locator('#workers tbody tr .s-live').count()) === 2);

  step('run A spends the window\'s one free call');
  // Start a fresh window of the simulator's clock now, so the rest B earns lasts at least
  // (almost) a whole window, whatever the time of day.
  const clock = await http('GET', `${SIM}/_sim/clock`, { token: null });
  const advance = WINDOW_MS - (clock.body.now_ms % WINDOW_MS);
  assert.equal((await http('POST', `${SIM}/_sim/clock`, { token: null, body: { advance_ms: advance } })).status, 200);
  const a = await enqueue('alice', 'first question [[answer:A is answered]]');
  await until('run A to succeed', async () => (await http('GET', `${BASE}/v1/runs/${a}`)).body.status === 'succeeded');

  step('run B earns the 429: the pool rests and B is delayed');
  const b = await enqueue('bob', 'second question [[answer:B is answered]]');
  await restRow.waitFor({ timeout: 20000 });
  const left1 = await remaining();
  assert.ok(left1 > 8000, `the rest has most of a window left: ${left1} ms`);
  assert.match(await restRow.locator('td').nth(2).textContent(), /account/, 'the reason names the verdict');
  await sleep(2200);
  const left2 = await remaining();
  assert.ok(left2 < left1 - 1500 && left2 > 0, `the countdown goes down: ${left1} then ${left2} ms`);
  assert.match(await restRow.locator('.countdown').textContent(), /\d+ s/);
  await until('B delayed in the list', async () => (await runStatus(b)) === 'delayed');
  await until('one delayed job in the queue', async () => (await page.textContent('#depth-delayed')) === '1');
  await page.screenshot({ path: SHOT, fullPage: true });
  step(`screenshot of the board during the rest: ${SHOT}`);

  step('the attempt logs: A succeeded at once, B met the 429');
  await until('A in the list', async () => (await runStatus(a)) === 'succeeded');
  await openRun(a);
  await until('A\'s attempt log', async () => (await attemptRows()).length === 1);
  let rows = await attemptRows();
  assert.equal(rows[0].http, '200');
  assert.equal(rows[0].verdict, 'ok');
  assert.equal(rows[0].route, `platform:openrouter/${FREE}`);
  assert.match(rows[0].latency, /^\d+ ms$/);
  assert.match(await page.textContent('#events'), /finished/);
  assert.match(await page.textContent('#transcript'), /first question/);
  assert.match(await page.textContent('#detail-output'), /A is answered/);
  await openRun(b);
  await until('B\'s attempt log', async () => (await attemptRows()).length === 1);
  rows = await attemptRows();
  assert.equal(rows[0].http, '429');
  assert.equal(rows[0].verdict, 'account');
  assert.equal(rows[0].left, '0', 'the rate-limit headroom the 429 reported');
  assert.match(await page.textContent('#events'), /delayed/);
  assert.match(await page.textContent('#detail-fields'), /wakes/);

  step('a viewer\'s clear is refused with a clear message');
  await restRow.locator('button.clear').click();
  await until('the 403 message', async () => /403/.test(await notice()) && /admin token/.test(await notice()));
  assert.equal(dialogs.length, 1, 'the clear asked for a confirmation');
  assert.equal((await http('GET', `${BASE}/v1/rests`)).body.rests.length, 1, 'the rest stays');
  assert.equal(await restRow.count(), 1);

  step('the operator signs in; a dismissed confirmation clears nothing');
  await page.click('#signout');
  await signIn(ADMIN_TOKEN);
  await until('the operator role', async () => /operator/.test(await page.textContent('#role')));
  answer = false;
  await restRow.locator('button.clear').click();
  await until('the second confirmation', async () => dialogs.length === 2);
  await sleep(500);
  assert.equal((await http('GET', `${BASE}/v1/rests`)).body.rests.length, 1, 'nothing was cleared');

  step('the window reopens; the operator clears the rest and the run it delayed calls at once');
  const reopened = await http('GET', `${SIM}/_sim/clock`, { token: null });
  const toNextWindow = WINDOW_MS - (reopened.body.now_ms % WINDOW_MS);
  assert.equal((await http('POST', `${SIM}/_sim/clock`, { token: null, body: { advance_ms: toNextWindow } })).status, 200);
  // B sleeps until the rest ends: a wake-up before then is the clear's.
  const restEnds = Date.now() + (await http('GET', `${BASE}/v1/rests`)).body.rests[0].remaining_ms;
  answer = true;
  await restRow.locator('button.clear').click();
  await until('the cleared message', async () => /Cleared the pool rest/.test(await notice()));
  await until('the rest to leave the page', async () => (await restRow.count()) === 0);
  assert.equal(await page.isVisible('#rests-empty'), true);
  await until('B to succeed in the list', async () => (await runStatus(b)) === 'succeeded', 2.5 * WINDOW_MS);
  assert.ok(Date.now() < restEnds, 'B ran before its old wake time');
  assert.equal((await http('GET', `${BASE}/v1/rests`)).body.rests.length, 0);
  await until('B\'s second attempt', async () => (await attemptRows()).length === 2);
  rows = await attemptRows();
  assert.deepEqual([rows[0].http, rows[1].http], ['429', '200']);
  assert.match(await page.textContent('#detail-output'), /B is answered/);
  await until('the delayed tile to empty', async () => (await page.textContent('#depth-delayed')) === '0');
  const detailShot = path.join(path.dirname(SHOT), 'board-run-detail.png');
  await page.locator('#detail').screenshot({ path: detailShot });
  step(`screenshot of a run's detail: ${detailShot}`);

  assert.deepEqual(pageErrors, [], 'no script error in the page');
  step('passed');
} catch (error) {
  failed = true;
  console.error(`board test FAILED: ${error.stack || error}`);
  if (pageErrors.length) console.error(`page errors: ${pageErrors.join('\n')}`);
  const failure = SHOT.replace(/\.png$/, '') + '-failure.png';
  await page.screenshot({ path: failure, fullPage: true }).catch(() => {});
  console.error(`the page at the failure: ${failure}`);
} finally {
  await context.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
