// The job board of a server without an API token (it listens on loopback only, and anyone who
// can reach it may read it): the dashboard shows at once, with no sign-in, as "open", and again
// after a reload; a link to a run opens it; operator actions stay hidden until the operator signs
// in with the admin token from the Sign in button. producer/tests/browser/board.rs starts the
// fleet, enqueues the run RUN_ID and runs this script; it exits non-zero on the first failed check.

import assert from 'node:assert/strict';
import { launch, need, until } from './lib.mjs';

const BASE = need('BOARD_URL');
const ADMIN_TOKEN = need('ADMIN_TOKEN');
const RUN_ID = need('RUN_ID');
// Each step says when it began (seconds since the script started): where the time goes.
const started = Date.now();
const step = (what) => console.log(`open board test [${((Date.now() - started) / 1000).toFixed(1)} s]: ${what}`);

const { page, close } = await launch('board-open', { viewport: { width: 1400, height: 1000 } });
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });

const listed = (id) => page.locator(`#runs tbody tr[data-run-id="${id}"] td.status`).getAttribute('data-status');
const shown = async () => await page.isVisible('#board') && !(await page.isVisible('#login'));

let failed = false;
try {
  step('the dashboard shows at once, as open, with the run and no operator actions');
  await page.goto(`${BASE}/board`);
  await until('the board without a sign-in', shown);
  await until('the open role', async () => (await page.textContent('#role')) === 'open (no token)');
  await until('the run in the list', async () => (await listed(RUN_ID)) === 'succeeded');
  for (const hidden of ['#bulk', '#audit-section', '#signout']) {
    assert.equal(await page.isVisible(hidden), false, `${hidden} is hidden`);
  }

  step('a reload shows the same board, still without a sign-in');
  await page.reload();
  await until('the board after the reload', shown);
  await until('the run again', async () => (await listed(RUN_ID)) === 'succeeded');

  step('a link to the run opens it');
  await page.goto(`${BASE}/board#run=${RUN_ID}`);
  await until('the run\'s detail', async () => (await page.textContent('#detail-id')) === RUN_ID
    && await page.isVisible('#detail') && /succeeded/.test(await page.textContent('#detail-fields')));
  assert.equal(await page.isVisible('#act-retry'), false, 'no action for an open viewer');

  step('the operator signs in with the admin token and gets the actions');
  await page.click('#signin');
  await page.fill('#login-token', ADMIN_TOKEN);
  await page.click('#login-submit');
  await until('the operator role', async () => /^operator/.test(await page.textContent('#role')));
  await until('the bulk actions', async () => page.isVisible('#bulk'));

  assert.deepEqual(errors, [], 'no script error in the page');
  step('passed');
} catch (error) {
  failed = true;
  console.error(`open board test FAILED: ${error.stack || error}`);
  if (errors.length) console.error(`page errors: ${errors.join('\n')}`);
} finally {
  await close();
}
process.exit(failed ? 1 : 0);
