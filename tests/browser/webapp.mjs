// Drives the example web app (producer/examples/webapp.rs) in headless Chromium: a question asked
// in the page is answered through the run's signed events_url, streamed by EventSource straight
// from freeway, with no API token in the page or on any request it makes; a second run's token
// does not open the first run's stream. producer/tests/webapp_browser.rs starts the fleet and
// the app, and runs this script; it exits non-zero on the first failed check.

import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const need = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const APP = need('APP_URL');
const FREEWAY = need('FREEWAY_URL');
const API_TOKEN = need('API_TOKEN');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const step = (what) => console.log(`webapp test: ${what}`);

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'freeway-webapp-chromium-'));
const context = await chromium.launchPersistentContext(dataDir, {
  executablePath: CHROMIUM,
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = context.pages()[0] ?? (await context.newPage());
const requests = [];
page.on('request', (r) => requests.push({ url: r.url(), headers: r.headers() }));
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));

async function ask(question) {
  await page.fill('#q', question);
  await page.click('#ask button');
  await page.waitForFunction(() => document.getElementById('state').textContent === 'succeeded',
    null, { timeout: 30000 });
  return {
    runId: await page.$eval('body', (b) => b.dataset.runId),
    eventsUrl: await page.$eval('body', (b) => b.dataset.eventsUrl),
    answer: await page.textContent('#answer'),
  };
}

let failed = false;
try {
  step('a question is answered in the page, streamed through the run\'s events_url');
  await page.goto(APP);
  const first = await ask('hello [[answer:Streamed to the browser]]');
  assert.equal(first.answer, 'Streamed to the browser');
  assert.ok(first.eventsUrl.startsWith(`${FREEWAY}/v1/runs/${first.runId}/events?token=`), first.eventsUrl);
  const streamed = requests.filter((r) => r.url.startsWith(first.eventsUrl));
  assert.ok(streamed.length >= 1, 'the browser opened the stream itself');

  step('no API token in the page or on any of its requests');
  assert.ok(!(await page.content()).includes(API_TOKEN), 'the page holds no token');
  for (const r of requests) {
    assert.ok(!r.headers.authorization, `no Authorization header: ${r.url}`);
    assert.ok(!r.url.includes(API_TOKEN), `no token in a URL: ${r.url}`);
  }

  step('a second run\'s token does not open the first run\'s stream');
  const second = await ask('again [[answer:Second answer]]');
  assert.notEqual(second.runId, first.runId);
  const token = new URL(second.eventsUrl).searchParams.get('token');
  const crossed = `${FREEWAY}/v1/runs/${first.runId}/events?token=${encodeURIComponent(token)}`;
  assert.equal((await fetch(crossed)).status, 403);
  assert.equal((await fetch(first.eventsUrl)).status, 200, 'its own token still opens it');
  assert.deepEqual(errors, [], 'no script error in the page');
  step('passed');
} catch (error) {
  failed = true;
  console.error(`webapp test FAILED: ${error.stack || error}`);
  await page.screenshot({ path: path.join(os.tmpdir(), 'webapp-failure.png') }).catch(() => {});
} finally {
  await context.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
