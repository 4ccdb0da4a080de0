// Drives the job board in headless Chromium (Debian's `chromium`, through playwright-core) against
// a running fleet: the producer at BOARD_URL, worker replicas and the simulator at SIM_URL with one
// free call per SIM_WINDOW_S window. producer/tests/browser/board.rs starts all of that and runs
// this script; it exits non-zero on the first failed check.
//
// The scenario: nothing of the dashboard shows before a valid token; the status tabs and paging
// go through the SEEDED_FAILED failed runs; a run opens by keyboard; run A spends the window's
// free call (the pools panel's use rises); run B earns the 429, so the pool rests and B is
// delayed. The page must show the rest with a countdown that goes down (a screenshot is taken
// then), each run's attempt log, no Clear or run actions for a viewer; the operator cancels a
// delayed run C, reads who waits for the pool and the spend by tenant, clears the rest (B then calls at the pool's next slot, not into the spent window), finds a failed run D by its input and retries it, by keyboard alone, into a
// success and approves the tool call run E waits on. Last, the page at 390 px fits its width, badges keep 4.5:1 contrast, and screenshots
// are taken in light and dark at desktop and phone width.

import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { http as request, launch, need, sleep, until } from './lib.mjs';

const BASE = need('BOARD_URL');
const SIM = need('SIM_URL');
const API_TOKEN = need('API_TOKEN');
const ADMIN_TOKEN = need('ADMIN_TOKEN');
const WINDOW_MS = Number(need('SIM_WINDOW_S')) * 1000;
const FREE = need('FREE_MODEL');
const SHOT = need('SCREENSHOT');
const SEEDED_FAILED = Number(need('SEEDED_FAILED'));
const PAID = need('PAID_MODEL');

// Each step says when it began (seconds since the script started): where the time goes.
const started = Date.now();
const step = (what) => console.log(`board test [${((Date.now() - started) / 1000).toFixed(1)} s]: ${what}`);
const AXE = fs.readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
/** A request with the API token unless another (or `null`) is given. */
const http = (method, url, { token = API_TOKEN, body } = {}) => request(method, url, { token, body });

async function enqueue(user, input, model = FREE) {
  const r = await http('POST', `${BASE}/v1/runs`, {
    body: { user_id: user, input, routes: [{ model }], on_rest: 'queue' },
  });
  assert.equal(r.status, 202, `POST /v1/runs: ${JSON.stringify(r.body)}`);
  return r.body.run_id;
}

const { context, page, close } = await launch('board', { viewport: { width: 1400, height: 1000 } });
const pageErrors = [];
/** Collect a tab's script errors. */
function watchErrors(tab) {
  tab.on('pageerror', (e) => pageErrors.push(String(e)));
  // The browser reports every 401 and 403 as a failed load; the scenario makes some on purpose.
  tab.on('console', (m) => {
    if (m.type() === 'error' && !/status of 40[13]/.test(m.text())) pageErrors.push(m.text());
  });
}
watchErrors(page);
/** The board's own API requests, counted: polling shows up here. */
let apiRequests = 0;
page.on('request', (r) => { if (r.url().includes('/v1/board/overview')) apiRequests += 1; });
const dialogs = [];
let answer = true;
/** What a prompt is answered with. */
let typed = '';
page.on('dialog', async (d) => {
  dialogs.push(d.message());
  if (!answer) await d.dismiss();
  else if (d.type() === 'prompt') await d.accept(typed);
  else await d.accept();
});

const restRow = page.locator('#rests tbody tr[data-scope="pool"][data-key="openrouter-free"]');
const runStatus = (id) => page.locator(`#runs tbody tr[data-run-id="${id}"] td.status`).getAttribute('data-status');
const remaining = async () => Number(await restRow.locator('.countdown').getAttribute('data-remaining-ms'));
const notice = async () => ((await page.isVisible('#notice')) ? page.textContent('#notice-text') : '');

async function signIn(token, tab = page) {
  await tab.locator('#login').waitFor({ state: 'visible' });
  await tab.fill('#login-token', token);
  await tab.click('#login-submit');
  await tab.locator('#board').waitFor({ state: 'visible' });
}

/** The element that has the focus, as `tag#id` or the run of its row. */
const focusedOn = (tab = page) => tab.evaluate(() => {
  const e = document.activeElement;
  const row = e && e.closest('tr[data-run-id]');
  return row ? 'run:' + row.getAttribute('data-run-id') : (e ? e.tagName.toLowerCase() + '#' + e.id : '');
});

/** The accessibility tree's nodes (Chromium's, through the DevTools protocol). */
async function axNodes(tab = page) {
  const cdp = await context.newCDPSession(tab);
  const { nodes } = await cdp.send('Accessibility.getFullAXTree');
  await cdp.detach();
  return nodes.filter((n) => !n.ignored).map((n) => ({
    role: n.role && n.role.value, name: n.name && n.name.value,
    description: n.description && n.description.value,
  }));
}

/** Every contrast WCAG AA asks of the page as it is drawn: text (4.5:1, 3:1 when large) against
 *  the background it sits on, and 3:1 for input borders, chart and meter bars and the focus
 *  ring. Colours come from the computed styles; a background is the first opaque one found
 *  going up the tree. */
async function contrastFailures(tab = page) {
  return tab.evaluate(() => {
    const parse = (c) => { const m = c.match(/[\d.]+/g) || [0, 0, 0, 0]; return { rgb: m.slice(0, 3).map(Number), a: m.length > 3 ? Number(m[3]) : 1 }; };
    const lum = ([r, g, b]) => {
      const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const ratio = (x, y) => { const [a, b] = [lum(x), lum(y)].sort((p, q) => q - p); return (a + 0.05) / (b + 0.05); };
    const backOf = (e) => {
      for (let n = e; n; n = n.parentElement) {
        const c = parse(getComputedStyle(n).backgroundColor);
        if (c.a >= 0.99) return c.rgb;
      }
      return parse(getComputedStyle(document.documentElement).backgroundColor).rgb;
    };
    const shown = (e) => e.offsetParent !== null || getComputedStyle(e).position === 'fixed';
    const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ').join('.') : '');
    const low = [];
    for (const e of document.querySelectorAll('body *')) {
      if (!shown(e) || e.closest('[disabled], .sr-only')) continue;
      const s = getComputedStyle(e);
      const text = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
      if (text && e.tagName !== 'OPTION') {
        const size = parseFloat(s.fontSize);
        const large = size >= 24 || (size >= 18.66 && Number(s.fontWeight) >= 700);
        const r = ratio(parse(s.color).rgb, backOf(e));
        if (r < (large ? 3 : 4.5)) low.push({ what: 'text', el: name(e), text: e.textContent.trim().slice(0, 30), ratio: r.toFixed(2) });
      }
      if (['INPUT', 'SELECT'].includes(e.tagName)) {
        const r = ratio(parse(s.borderTopColor).rgb, backOf(e.parentElement));
        if (r < 3) low.push({ what: 'border', el: name(e), ratio: r.toFixed(2) });
      }
      if (e.matches('.chart span, .chart span i, .meter span') && e.getBoundingClientRect().height > 0) {
        const r = ratio(parse(s.backgroundColor).rgb, backOf(e.parentElement.parentElement));
        if (r < 3) low.push({ what: 'bar', el: name(e), ratio: r.toFixed(2) });
      }
    }
    for (const target of [document.querySelector('header button:not([hidden])'), document.querySelector('#runs a, main button')]) {
      if (!target) continue;
      target.focus();
      const s = getComputedStyle(target);
      if (s.outlineStyle !== 'none') {
        const r = ratio(parse(s.outlineColor).rgb, backOf(target.parentElement));
        if (r < 3) low.push({ what: 'focus ring', el: name(target), ratio: r.toFixed(2) });
      }
      target.blur();
    }
    return low;
  });
}

/** axe-core's serious and critical violations on the page (axe is evaluated through the
 *  DevTools protocol, which the page's CSP does not govern). */
async function axeViolations(tab = page) {
  await tab.evaluate(AXE);
  const result = await tab.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  return result.violations.filter((v) => ['serious', 'critical'].includes(v.impact))
    .map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')) }));
}

/** No poll for `ms`: the count of overview requests stays put. */
async function noPollFor(ms) {
  const before = apiRequests;
  await sleep(ms);
  return apiRequests === before;
}

const apiStatus = async (id) => (await http('GET', `${BASE}/v1/runs/${id}`)).body.status;
/** The pool's calls today: unlike the window's, the count does not start over while a test looks. */
const poolDayUsed = async () => Number(await page.locator('#pools [data-pool="openrouter-free"]').getAttribute('data-day-used'));
const shot = (name) => path.join(path.dirname(SHOT), name);

/** The ids of the runs listed on the page now. */
const listedIds = () => page.$$eval('#runs tbody tr', (rows) => rows.map((r) => r.getAttribute('data-run-id')));

/** Every badge's text colour against its background, as WCAG computes contrast. */
async function badgeContrasts() {
  return page.$$eval('.badge', (badges) => {
    const rgb = (c) => c.match(/\d+(\.\d+)?/g).slice(0, 3).map(Number);
    const lum = ([r, g, b]) => {
      const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    return badges.filter((b) => b.offsetParent !== null).map((b) => {
      const s = getComputedStyle(b);
      const [l1, l2] = [lum(rgb(s.color)), lum(rgb(s.backgroundColor))].sort((x, y) => y - x);
      return { text: b.textContent, ratio: (l1 + 0.05) / (l2 + 0.05) };
    });
  });
}

async function openRun(id) {
  await page.click(`#runs tbody tr[data-run-id="${id}"]`);
  await until(`the detail of ${id}`, async () => (await page.getAttribute('#detail', 'data-shown')) === id
    && await page.isVisible('#detail'));
}

/** The attempt log shown in the page, one object per row. */
async function attemptRows() {
  return page.$$eval('#attempts tbody tr', (rows) => rows.map((r) => {
    const c = [...r.cells].map((td) => td.textContent);
    return { n: c[0], step: c[1], route: c[2], http: c[3], verdict: c[4], latency: c[5], retry: c[6],
      left: c[7], provider: c[8], cost: c[9], error: c[10] };
  }));
}

let failed = false;
try {
  step('the page asks for a token, shows nothing of the dashboard before one, and refuses a wrong one');
  await page.goto(`${BASE}/board`);
  await page.locator('#login').waitFor({ state: 'visible' });
  for (const part of ['#board', '#queue', '#runs-section', '#pools-section']) {
    assert.equal(await page.isVisible(part), false, `${part} is hidden before sign-in`);
  }
  assert.equal(await page.$eval('#board', (b) => getComputedStyle(b).display), 'none');
  await page.fill('#login-token', 'not-the-token');
  await page.click('#login-submit');
  await until('the refusal', async () => (await page.textContent('#login-error')).includes('401'));
  assert.equal(await page.isVisible('#board'), false, 'a wrong token shows nothing either');
  await signIn(API_TOKEN);
  await until('the viewer role', async () => /viewer/.test(await page.textContent('#role')));

  step(`the failed tab counts ${SEEDED_FAILED} runs, and paging goes through all of them`);
  await page.click('#tabs button[data-status="failed"]');
  await until('the failed tab pressed, with its count', async () =>
    (await page.getAttribute('#tabs button[data-status="failed"]', 'aria-pressed')) === 'true'
    && Number(await page.textContent('#tabs button[data-status="failed"] b')) === SEEDED_FAILED);
  assert.match(page.url(), /status=failed/, 'the filter is in the link');
  const pagedIds = new Set();
  for (let n = 1; ; n += 1) {
    const ids = await until(`page ${n}`, async () => {
      const shown = await listedIds();
      const statuses = await page.$$eval('#runs tbody td.status', (cells) => cells.map((c) => c.getAttribute('data-status')));
      return (await page.textContent('#page-note')) === `page ${n}` && shown.length > 0
        && !pagedIds.has(shown[0]) && statuses.every((x) => x === 'failed') ? shown : null;
    });
    ids.forEach((id) => pagedIds.add(id));
    if (await page.isDisabled('#page-older')) break;
    await page.click('#page-older');
  }
  assert.equal(pagedIds.size, SEEDED_FAILED, 'every failed run once');
  await page.click('#page-newer');
  await until('back one page', async () => (await page.textContent('#page-note')) === `page ${Math.ceil(SEEDED_FAILED / 50) - 1}`);

  step('a run opens by keyboard, takes the focus to its detail, and Escape brings it back');
  const firstRow = page.locator('#runs tbody tr').first();
  const firstId = await firstRow.getAttribute('data-run-id');
  await firstRow.locator('a.run-link').focus();
  await page.keyboard.press('Enter');
  await until('the detail of the focused run', async () => (await page.textContent('#detail-id')) === firstId
    && await page.isVisible('#detail'));
  assert.match(page.url(), new RegExp(`#run=${firstId}`), 'a deep link to it');
  await until('the focus on the detail', async () => (await focusedOn()) === 'h2#detail-title');
  for (const action of ['#act-retry', '#act-wake', '#act-cancel']) {
    assert.equal(await page.isVisible(action), false, `a viewer is shown no ${action}`);
  }
  assert.match(await page.textContent('#detail-fields'), /routes_exhausted — the first step failed on every route/, 'the code in words');
  await page.keyboard.press('Escape');
  await until('the detail closed', async () => !(await page.isVisible('#detail')));
  assert.equal(await focusedOn(), `run:${firstId}`, 'the focus is back on the run it left');

  step('the rows read as rows: a link named by the run, the cells as text; the tiles say what they count');
  const ax = await axNodes();
  assert.ok(ax.some((n) => n.role === 'link' && n.name === firstId), 'the run\'s link in the tree');
  assert.equal(await page.locator('#runs [role="button"], #runs [aria-label]').count(), 0, 'no label hides a row\'s cells');
  const waitingTile = ax.find((n) => n.description && /Due and waiting for a worker/.test(n.description));
  assert.ok(waitingTile, 'the waiting tile is described in the tree');

  step('the day\'s totals count the runs that ended, by outcome, ten minutes a bar');
  await until('the seeded failures in the day\'s totals', async () =>
    Number(await page.getAttribute('#totals-summary', 'data-failed')) >= SEEDED_FAILED);
  assert.equal(await page.locator('#totals-chart span').count(), 144, 'a bar each ten minutes');
  assert.match(await page.getAttribute('#totals-chart', 'aria-label'), new RegExp(`${SEEDED_FAILED} failed`), 'the chart says it in words');

  step('the filters and the page are in the URL; a reload shows the same board, the same runs');
  await page.fill('#user-filter', 'seed3');
  await page.click('#filters button[type="submit"]');
  await until('only seed3\'s runs', async () => {
    const users = await page.$$eval('#runs tbody tr', (rows) => rows.map((r) => r.cells[1].textContent));
    return users.length > 0 && users.every((u) => u === 'seed3');
  });
  await page.click('#page-older');
  await until('page 2', async () => (await page.textContent('#page-note')) === 'page 2');
  assert.match(page.url(), /user_id=seed3/);
  assert.match(page.url(), /status=failed/);
  const page2 = await listedIds();
  await page.reload();
  await page.locator('#board').waitFor({ state: 'visible' });
  await until('the same page after the reload', async () => (await page.textContent('#page-note')) === 'page 2'
    && JSON.stringify(await listedIds()) === JSON.stringify(page2));
  assert.equal(await page.inputValue('#user-filter'), 'seed3');
  assert.equal(await page.getAttribute('#tabs button[data-status="failed"]', 'aria-pressed'), 'true');

  step('the code filter lists the codes and finds the failed runs by theirs');
  await page.fill('#user-filter', '');
  await page.selectOption('#code-filter', 'routes_exhausted');
  await until('the code in the URL', async () => /code=routes_exhausted/.test(page.url()) && (await page.textContent('#page-note')) === 'page 1');
  await until('routes_exhausted runs only', async () => {
    const codes = await page.$$eval('#runs tbody tr', (rows) => rows.map((r) => r.cells[5].textContent));
    return codes.length === 50 && codes.every((c) => c === 'routes_exhausted');
  });
  await page.selectOption('#code-filter', '');

  step('a link to a run in a new tab: after the sign-in the run shows, in view, with no stale error');
  const tab = await context.newPage();
  watchErrors(tab);
  await tab.goto(`${BASE}/board?status=failed#run=${firstId}`);
  await signIn(API_TOKEN, tab);
  await until('the linked run in view', async () => (await tab.textContent('#detail-id')) === firstId
    && await tab.isVisible('#detail') && (await tab.locator('#detail').boundingBox()).y < 1000
    && (await tab.locator('#detail').boundingBox()).y > -100);
  assert.equal(await tab.isVisible('#notice'), false, 'no error from before the sign-in');
  const otherId = page2[0];
  await tab.evaluate((id) => { location.hash = 'run=' + id; }, otherId);
  await until('a changed #run= opens that run', async () => (await tab.textContent('#detail-id')) === otherId
    && /routes_exhausted/.test(await tab.textContent('#detail-fields')));
  await tab.close();

  step('updates pause with the Live toggle and while the tab is hidden, and resume');
  await page.click('#live-toggle');
  assert.equal(await page.getAttribute('#live-toggle', 'aria-pressed'), 'false');
  assert.ok(await noPollFor(2500), 'no poll while paused');
  assert.match(await page.textContent('#live-text'), /paused/);
  await page.click('#live-toggle');
  await until('a poll again', async () => !(await noPollFor(1200)));
  await page.evaluate(() => {
    Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
    document.dispatchEvent(new Event('visibilitychange'));
  });
  assert.ok(await noPollFor(2500), 'no poll while the tab is hidden');
  await page.evaluate(() => {
    delete document.visibilityState;
    document.dispatchEvent(new Event('visibilitychange'));
  });
  await until('a poll once it is in view', async () => !(await noPollFor(1200)));
  await page.click('#tabs button[data-status="all"]');

  step('both workers show with a recent heartbeat');
  await until('two live workers', async () => (await page.locator('#workers tbody tr .s-live').count()) === 2);

  step('run A spends the window\'s one free call');
  // Start a fresh window of the simulator's clock now, so the rest B earns lasts at least
  // (almost) a whole window, whatever the time of day.
  const clock = await http('GET', `${SIM}/_sim/clock`, { token: null });
  const advance = WINDOW_MS - (clock.body.now_ms % WINDOW_MS);
  assert.equal((await http('POST', `${SIM}/_sim/clock`, { token: null, body: { advance_ms: advance } })).status, 200);
  await until('the pools panel', async () => (await page.locator('#pools [data-pool="openrouter-free"]').count()) === 1);
  const usedBefore = await poolDayUsed();
  const kept = await page.locator('#runs tbody tr').first().getAttribute('data-run-id');
  await page.locator(`#runs tbody tr[data-run-id="${kept}"] a.run-link`).focus();
  const a = await enqueue('alice', 'first question [[answer:A is answered]]');
  await until('run A to succeed', async () => (await apiStatus(a)) === 'succeeded');
  await until('A listed above the focused run', async () => (await runStatus(a)) === 'succeeded');
  assert.equal(await focusedOn(), `run:${kept}`, 'a new row takes no focus from the run an operator is on');
  // The day's count, not the window's: freeway's window is on the real clock, not the
  // simulator's advanced one, and may end between A's call and the board's next poll.
  await until('the pool\'s use to rise', async () => (await poolDayUsed()) > usedBefore);

  step('run B earns the 429: the pool rests and B is delayed');
  const b = await enqueue('bob', 'second question [[answer:B is answered]]');
  await restRow.waitFor({ timeout: 20000 });
  const left1 = await remaining();
  assert.ok(left1 > 8000, `the rest has most of a window left: ${left1} ms`);
  assert.match(await restRow.locator('td').nth(2).getAttribute('title'), /account/, 'the raw reason names the verdict');
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
  assert.match(rows[0].error, /^HTTP 429: .*Rate limit exceeded: free-models-per-min/, 'the provider\'s own words');
  assert.match(await page.textContent('#detail-input'), /second question/, 'the input it was asked');
  const wakes = await page.textContent('#detail-fields');
  assert.match(wakes, /wakes.*(waiting its turn in the pool's limiter|the shared pool is used up)/, `the delay's reason in words: ${wakes}`);
  assert.match(await page.textContent('#events'), /delayed/);
  assert.match(await page.textContent('#detail-fields'), /wakes/);

  // No configuration names the free model, so its calls count under the provider's `other`
  // (a request's model is no series of its own).
  step('the routes panel charts the free route\'s calls, one of them rate-limited');
  const routeCell = (i) => page.locator('#routes tbody tr[data-route="platform:openrouter/other"] td').nth(i);
  await until('the free route in the routes panel', async () => Number(await routeCell(2).textContent()) >= 2
    && Number(await routeCell(3).textContent()) >= 1);
  assert.ok((await routeCell(1).locator('.chart span').count()) === 60, 'a bar a minute for the hour');

  step('a viewer is shown no Clear; the reason reads as words');
  assert.equal(await restRow.locator('button.clear').isVisible(), false);
  assert.match(await restRow.locator('td').nth(2).textContent(), /Shared pool openrouter-free is used up — reopens/);

  step('the operator signs in; a dismissed confirmation clears nothing');
  await page.click('#signout');
  await signIn(ADMIN_TOKEN);
  await until('the operator role', async () => /operator/.test(await page.textContent('#role')));
  answer = false;
  await restRow.locator('button.clear').click();
  await until('the confirmation', async () => dialogs.length === 1);
  await sleep(500);
  assert.equal((await http('GET', `${BASE}/v1/rests`)).body.rests.length, 1, 'nothing was cleared');
  answer = true;

  step('"Run now" during the rest says the run keeps waiting, beside the button, and it does');
  await openRun(b);
  await page.locator('#act-wake').waitFor({ state: 'visible' });
  await page.click('#act-wake');
  await until('the answer beside the actions', async () => (await page.isVisible('#action-result'))
    && /not woken: .+ it waits \d+ s more/.test(await page.textContent('#action-result')));
  assert.equal(await focusedOn(), 'div#action-result', 'the focus on the answer');
  const resultBox = await page.locator('#action-result').boundingBox();
  assert.ok(resultBox.y >= 0 && resultBox.y < 1000, `the answer is in view: ${resultBox.y}`);
  assert.equal(await apiStatus(b), 'delayed', 'and it is still delayed');

  step('the operator cancels a delayed run by keyboard');
  const c = await enqueue('carol', 'third question');
  await until('C delayed', async () => (await apiStatus(c)) === 'delayed');
  await until('C in the list', async () => (await runStatus(c)) === 'delayed');
  await openRun(c);
  await page.locator('#act-cancel').waitFor({ state: 'visible' });
  await page.locator('#detail-title').focus();
  let tabs = 0;
  while ((await focusedOn()) !== 'button#act-cancel' && tabs < 6) { await page.keyboard.press('Tab'); tabs += 1; }
  assert.equal(await focusedOn(), 'button#act-cancel', `a few Tabs from the detail to its actions: ${tabs}`);
  await page.keyboard.press('Enter');
  await until('C cancelled', async () => (await apiStatus(c)) === 'cancelled');
  await until('the cancelled badge', async () => (await runStatus(c)) === 'cancelled');

  step('a bulk cancel of one user\'s delayed runs names the count and cancels them');
  const waiting = [await enqueue('gus', 'while the pool rests'), await enqueue('gus', 'while the pool rests too')];
  for (const id of waiting) await until('gus\'s run delayed by the rest', async () => (await apiStatus(id)) === 'delayed');
  await page.fill('#user-filter', 'gus');
  await page.click('#filters button[type="submit"]');
  await until('gus\'s two runs listed', async () => (await listedIds()).length === 2);
  const cancelDialogs = dialogs.length;
  await page.click('#bulk-cancel');
  await until('the bulk cancel\'s answer', async () => /^2 runs cancelled/.test(await page.textContent('#bulk-result')));
  assert.match(dialogs[cancelDialogs], /^Cancel 2 runs/, 'the confirmation names the count');
  for (const id of waiting) assert.equal(await apiStatus(id), 'cancelled');
  await page.fill('#user-filter', '');
  await page.click('#filters button[type="submit"]');

  step('the pools panel shows the limit the 429 stated, where it stated it, beside the configured one, and the miss');
  const poolCard = page.locator('#pools [data-pool="openrouter-free"]');
  await until('the learned limit', async () => /provider says 1/.test(await poolCard.locator('.limit-origin').first().textContent()));
  assert.match(await poolCard.locator('.limit-origin').first().textContent(), /provider says 1 in its headers/);
  assert.match(await poolCard.textContent(), /configured 20/);
  assert.match(await poolCard.textContent(), /pacing misses: 1/);
  assert.match(await poolCard.textContent(), /ends in \d+ (s|min)/, 'the window\'s end');
  assert.match(await poolCard.locator('.reserved').textContent(), /^reserved: \d+ slots of later windows held by waiting runs$/);

  step('each pool says how many runs of how many tenants wait; spend by tenant lists the day\'s tenants');
  const waitingLine = poolCard.locator('.waiting').first();
  await until('the waiting line on the pool\'s card', async () => (await waitingLine.count()) === 1);
  const waitingPools = (await http('GET', `${BASE}/v1/pools`)).body.pools;
  const freeUse = waitingPools.find((p) => p.name === 'openrouter-free').use;
  assert.equal(typeof freeUse.waiting, 'number', 'the pool shows its waiting runs');
  assert.ok(Array.isArray(freeUse.shares), 'and this window\'s shares');
  assert.match(await waitingLine.textContent(), /^(no run waiting its turn|\d+ runs? of \d+ tenants? waiting)$/);
  const tenantRow = (t) => page.locator(`#tenants tbody tr[data-tenant="${t}"]`);
  await until('alice and bob in spend by tenant', async () => (await tenantRow('alice').count()) === 1
    && (await tenantRow('bob').count()) === 1 && Number(await tenantRow('alice').locator('td').nth(5).textContent()) >= 1);
  const aliceCells = await tenantRow('alice').locator('td').allTextContents();
  assert.equal(aliceCells[1], 'default', 'its newest run\'s tier');
  assert.match(aliceCells[2], /^\$\d/, 'spent today, in dollars');
  assert.equal(await tenantRow('alice').locator('td.spent').getAttribute('data-from'), 'attempt_log', 'no cap: the log\'s spend');
  assert.match(aliceCells[3], /^\$\d/, 'reserved, in dollars');
  assert.equal(aliceCells[4], 'no cap', 'the default tier has no cap');
  assert.equal(await page.isVisible('#tenants-empty'), false);
  const listed = (await http('GET', `${BASE}/v1/tenants`)).body.tenants;
  const alice = listed.find((t) => t.tenant === 'alice');
  assert.ok(alice && alice.tier === 'default' && alice.cap_usd === null && alice.calls >= 1, JSON.stringify(listed));
  const aliceUsage = (await http('GET', `${BASE}/v1/tenants/alice/usage`)).body;
  assert.equal(aliceUsage.days.length, 30);
  assert.ok(aliceUsage.routes.some((r) => r.route === `platform:openrouter/${FREE}` && r.calls >= 1), JSON.stringify(aliceUsage));
  assert.equal((await http('GET', `${BASE}/v1/tenants/a%20b/usage`)).status, 400);

  step('the operator clears the rest; the run it delayed still waits for the pool\'s next slot, then succeeds in it');
  // The clear sends no call into the window the provider spent: B is admitted by the limiter.
  const pools = (await http('GET', `${BASE}/v1/pools`)).body.pools;
  const windowEnds = Date.now() + pools.find((p) => p.name === 'openrouter-free').use.window_resets_in_ms;
  await restRow.locator('button.clear').click();
  await until('the cleared message', async () => /Cleared the pool rest/.test(await notice()));
  await until('the rest to leave the page', async () => (await restRow.count()) === 0);
  assert.equal(await page.isVisible('#rests-empty'), true);
  await until('B to succeed in the list', async () => (await runStatus(b)) === 'succeeded', 2.5 * WINDOW_MS);
  const bRun = (await http('GET', `${BASE}/v1/runs/${b}`)).body;
  assert.ok(bRun.attempts[1].t_ms >= windowEnds - 1000,
    `B's second call waited for the next window: ${bRun.attempts[1].t_ms} vs ${windowEnds}`);
  assert.equal((await http('GET', `${BASE}/v1/rests`)).body.rests.length, 0);
  await openRun(b);
  await until('B\'s second attempt', async () => (await attemptRows()).length === 2);
  rows = await attemptRows();
  assert.deepEqual([rows[0].http, rows[1].http], ['429', '200']);
  assert.match(await page.textContent('#detail-output'), /B is answered/);
  await until('the delayed tile to empty', async () => (await page.textContent('#depth-delayed')) === '0');
  const detailShot = path.join(path.dirname(SHOT), 'board-run-detail.png');
  await page.locator('#detail').screenshot({ path: detailShot });
  step(`screenshot of a run's detail: ${detailShot}`);

  step('the operator pauses the pool with a reason: it rests for every replica, says why, and resumes');
  typed = 'provider maintenance';
  await poolCard.locator('button.pause').first().click();
  await until('the pause in the rests list', async () => (await restRow.count()) === 1
    && /Paused by an operator: provider maintenance/.test(await restRow.locator('td').nth(2).textContent()));
  assert.equal(await restRow.locator('button.clear').textContent(), 'Resume');
  const paused = (await http('GET', `${BASE}/v1/rests`)).body.rests.find((r) => r.scope === 'pool');
  assert.ok(paused && paused.remaining_ms > 24 * 3600 * 1000, `a pause lasts until the resume: ${JSON.stringify(paused)}`);
  await restRow.locator('button.clear').click();
  await until('the resume', async () => (await restRow.count()) === 0);

  step('keyboard only: the operator finds a failed run by its input, opens it, retries it; the new run succeeds');
  const faults = { kind: 'server_500', model: PAID, count: 2 };
  assert.equal((await http('POST', `${SIM}/_sim/faults`, { token: null, body: faults })).status, 201);
  const d = await enqueue('dave', 'fourth question [[answer:D is answered]]', PAID);
  await until('D failed', async () => (await apiStatus(d)) === 'failed', 20000);
  await until('D in the list', async () => (await runStatus(d)) === 'failed');
  // Keyboard only, from the search field: the failed run has no answer; its input finds it.
  await page.locator('#search').focus();
  await page.keyboard.type('fourth question');
  await page.keyboard.press('Enter');
  await until('D alone in the list', async () => /q=fourth\+question/.test(page.url())
    && JSON.stringify(await listedIds()) === JSON.stringify([d]));
  let keys = 0;
  while ((await focusedOn()) !== `run:${d}` && keys < 12) { await page.keyboard.press('Tab'); keys += 1; }
  assert.equal(await focusedOn(), `run:${d}`, `a few Tabs from the search to the run: ${keys}`);
  await page.keyboard.press('Enter');
  await until('D\'s detail, focused', async () => (await page.textContent('#detail-id')) === d
    && (await focusedOn()) === 'h2#detail-title' && await page.isVisible('#act-retry'));
  keys = 0;
  while ((await focusedOn()) !== 'button#act-retry' && keys < 6) { await page.keyboard.press('Tab'); keys += 1; }
  assert.equal(await focusedOn(), 'button#act-retry', `a few Tabs from the detail to Retry: ${keys}`);
  await page.keyboard.press('Enter');
  await until('the retry message', async () => /Retried as run/.test(await page.textContent('#action-result')));
  assert.equal(await focusedOn(), 'div#action-result', 'the focus on the answer');
  const retried = (await page.textContent('#action-result')).match(/run (\S+) \(shown here\)/)[1];
  await until('the retried run to succeed', async () => (await apiStatus(retried)) === 'succeeded', 20000);
  await until('its detail', async () => (await page.textContent('#detail-id')) === retried
    && /D is answered/.test(await page.textContent('#detail-output')));
  assert.match(await page.textContent('#detail-fields'), new RegExp(`retries${d}`));
  assert.match(await page.textContent('#detail-fields'), /spent\$\d/, 'what it cost');
  assert.equal(await page.locator('#detail-fields a', { hasText: d }).count(), 1, 'the retried run is a link');
  await page.fill('#search', '');
  await page.click('#filters button[type="submit"]');

  step('the operator approves a tool call the run waits on, and its continuation succeeds');
  const asked = await http('POST', `${BASE}/v1/runs`, { body: { user_id: 'erin', input: 'mail Bob [[tools:1]] [[tool:send_email]]',
    routes: [{ model: PAID }], tools: [{ name: 'send_email', approval: 'required' }] } });
  assert.equal(asked.status, 202, JSON.stringify(asked.body));
  const e = asked.body.run_id;
  let eSeen = '';
  await until('E awaiting approval', async () => {
    const run = (await http('GET', `${BASE}/v1/runs/${e}`)).body;
    eSeen = JSON.stringify({ status: run.status, code: run.code, output: run.output, attempts: run.attempts });
    if (['failed', 'refused', 'succeeded'].includes(run.status)) throw new Error(eSeen);
    return run.status === 'awaiting_approval';
  }, 20000).catch((err) => { throw new Error(`${err.message}; E: ${eSeen}`); });
  await until('E in the list', async () => (await runStatus(e)) === 'awaiting_approval');
  await openRun(e);
  await page.locator('#act-approve').waitFor({ state: 'visible' });
  assert.equal(await page.isVisible('#act-deny'), true);
  await page.click('#act-approve');
  await until('the approval message', async () => /Approved: run \S+ carries on/.test(await page.textContent('#action-result')));
  const continuation = (await page.textContent('#action-result')).match(/run (\S+) carries on/)[1];
  await until('the continuation to succeed', async () => (await apiStatus(continuation)) === 'succeeded', 20000);

  step('the model and tenant filters find the runs of a route and of a tenant');
  await page.click('#tabs button[data-status="all"]');
  await page.fill('#route-filter', FREE);
  await page.click('#filters button[type="submit"]');
  await until('only the free route\'s runs', async () => {
    const routes = await page.$$eval('#runs tbody tr', (rows) => rows.map((r) => r.cells[7].textContent));
    const ids = await listedIds();
    return /route=/.test(page.url()) && ids.includes(a) && ids.includes(b) && !ids.includes(d)
      && routes.every((r) => r.includes(FREE));
  });
  await page.fill('#route-filter', '');
  await page.fill('#tenant-filter', 'alice');
  await page.click('#filters button[type="submit"]');
  await until('only alice\'s runs', async () => /tenant=alice/.test(page.url())
    && JSON.stringify(await listedIds()) === JSON.stringify([a]));
  await page.fill('#tenant-filter', '');

  step('a bulk retry: the count is confirmed, it is one action, and the audit lists every action');
  await page.click('#tabs button[data-status="failed"]');
  await page.fill('#user-filter', 'seed3');
  await page.click('#filters button[type="submit"]');
  await until('seed3\'s failed runs', async () => /user_id=seed3/.test(page.url()) && (await listedIds()).length === 50);
  const seed3 = (await http('GET', `${BASE}/v1/runs?status=failed&user_id=seed3&limit=1`)).body.counts.failed;
  const dialogsBefore = dialogs.length;
  await page.click('#bulk-retry');
  await until('the bulk result', async () => /runs retried as new runs/.test(await page.textContent('#bulk-result')));
  assert.match(dialogs[dialogsBefore], new RegExp(`^Retry ${seed3} runs as new runs`), 'the confirmation names the count');
  assert.match(await page.textContent('#bulk-result'), new RegExp(`^${seed3} runs retried`));
  assert.equal(await focusedOn(), 'div#bulk-result', 'the answer has the focus');
  await until('the audit trail on the board', async () => {
    const actions = await page.$$eval('#audit tbody tr', (rows) => rows.map((r) => r.getAttribute('data-action')));
    return ['bulk_retry', 'bulk_cancel', 'retry', 'approve', 'clear', 'pause', 'cancel', 'wake'].every((a) => actions.includes(a)) ? actions : null;
  });
  assert.match(await page.locator('#audit tbody tr[data-action="bulk_retry"]').first().textContent(), /status in \(failed\) · user seed3/);
  await page.fill('#user-filter', '');
  await page.click('#filters button[type="submit"]');
  await page.click('#tabs button[data-status="all"]');

  step('a spent day: the pools panel says the pool is closed until midnight');
  // One free call a day from now on: the quota endpoint (or else the next free call's refusal)
  // shows the day spent.
  assert.equal((await http('POST', `${SIM}/_sim/config`, { token: null, body: { rpd: 1 } })).status, 200);
  await enqueue('fran', 'fifth question');
  await until('the spent day on the pool\'s card', async () =>
    /The day is spent: closed until midnight/.test(await poolCard.textContent()), 2.5 * WINDOW_MS);
  assert.match(await poolCard.textContent(), /closed until midnight [^(]+\(in \d+ (h|min|s)/, 'the moment and a countdown');

  step('WCAG AA contrast everywhere and no serious axe-core violation, light and dark, desktop and phone; the phone layout fits 390 px; screenshots');
  // A run's detail open (by its link: the list's first page has newer runs now).
  await page.evaluate((id) => { location.hash = 'run=' + id; }, d);
  // The id changes at once, the fields when D's detail is read: wait for what only D's have.
  await until('D\'s detail, showing its retry and how long it took', async () => {
    const fields = await page.textContent('#detail-fields');
    return (await page.textContent('#detail-id')) === d && await page.isVisible('#detail')
      && new RegExp(`retried as${retried}`).test(fields) && /took\d/.test(fields);
  });
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width: 1400, height: 1000 });
    await sleep(300);
    const low = (await badgeContrasts()).filter((b) => b.ratio < 4.5);
    assert.deepEqual(low, [], `badges under 4.5:1 in ${scheme}`);
    assert.deepEqual(await contrastFailures(), [], `contrast under AA in ${scheme}`);
    assert.deepEqual(await axeViolations(), [], `axe-core at desktop width in ${scheme}`);
    await page.screenshot({ path: shot(`board-desktop-${scheme}.png`), fullPage: true });
    await page.setViewportSize({ width: 390, height: 844 });
    await sleep(300);
    const wide = await page.evaluate(() => {
      const w = window.innerWidth;
      const over = [...document.querySelectorAll('body *')].filter((e) => e.offsetParent !== null
        && e.getBoundingClientRect().right > w + 0.5).map((e) => e.tagName + '#' + e.id + '.' + e.className);
      return { scroll: document.documentElement.scrollWidth, inner: w, over: over.slice(0, 5) };
    });
    assert.ok(wide.scroll <= wide.inner && wide.over.length === 0, `at 390 px in ${scheme}: ${JSON.stringify(wide)}`);
    assert.deepEqual(await contrastFailures(), [], `contrast under AA at 390 px in ${scheme}`);
    assert.deepEqual(await axeViolations(), [], `axe-core at 390 px in ${scheme}`);
    await page.screenshot({ path: shot(`board-phone-${scheme}.png`), fullPage: true });
  }
  step('screenshots: target/board-{desktop,phone}-{light,dark}.png');

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
  await close();
}
process.exit(failed ? 1 : 0);
