// Drives the example web app (producer/examples/webapp.rs) in headless Chromium: a question asked
// in the page is answered through the run's signed events_url, streamed by EventSource straight
// from freeway at its public URL (a name only the browser resolves, so the app's server must use
// its own FREEWAY_URL), with no API token in the page or on any request it makes; a second run's
// token does not open the first run's stream; a delayed run shows "delayed" and a countdown,
// then its answer once the rest is cleared; a second question closes the first question's
// stream, so its answer alone is shown; a stream freeway refuses (403, 503) and a question it
// refuses are messages, and a stream refused for want of a slot is tried again.
// producer/tests/browser/webapp.rs starts the fleet and the app, and runs this script; it exits
// non-zero on the first failed check.

import assert from 'node:assert/strict';
import os from 'node:os';
import path from 'node:path';
import { launch, need } from './lib.mjs';

const APP = need('APP_URL');
// freeway as the app's server and this script reach it, and as the browser does.
const FREEWAY = need('FREEWAY_URL');
const PUBLIC = need('FREEWAY_PUBLIC_URL');
const API_TOKEN = need('API_TOKEN');
const ADMIN_TOKEN = need('ADMIN_TOKEN');
const SIM = need('SIM_URL');
const MODEL = need('MODEL');
// Each step says when it began (seconds since the script started): where the time goes.
const started = Date.now();
const step = (what) => console.log(`webapp test [${((Date.now() - started) / 1000).toFixed(1)} s]: ${what}`);

const { context, page, close } = await launch('webapp', {
  // The public name resolves in the browser alone: the app's server cannot use it.
  extraArgs: [`--host-resolver-rules=MAP ${new URL(PUBLIC).hostname} 127.0.0.1`],
});
// Every EventSource the page makes, to count the open ones.
await context.addInitScript(() => {
  const Native = window.EventSource;
  window.__streams = [];
  window.EventSource = class extends Native {
    constructor(...args) {
      super(...args);
      window.__streams.push(this);
    }
  };
});
const requests = [];
page.on('request', (r) => requests.push({ url: r.url(), headers: r.headers() }));
const errors = [];
page.on('pageerror', (e) => errors.push(String(e)));

// This script cannot resolve the public name: it reads freeway at the server's URL.
const onServer = (url) => {
  assert.ok(url.startsWith(PUBLIC), url);
  return FREEWAY + url.slice(PUBLIC.length);
};
const text = (selector) => page.textContent(selector);
const openStreams = () => page.evaluate(() => window.__streams.filter((s) => s.readyState !== 2).length);
const streamsMade = () => page.evaluate(() => window.__streams.length);
const run = async () => ({
  runId: await page.$eval('body', (b) => b.dataset.runId),
  eventsUrl: await page.$eval('body', (b) => b.dataset.eventsUrl),
  answer: await text('#answer'),
});

async function submit(question) {
  await page.fill('#q', question);
  await page.click('#ask button');
}

async function stateIs(state, timeout = 30000) {
  try {
    await page.waitForFunction((s) => document.getElementById('state').textContent === s, state, { timeout });
  } catch (e) {
    throw new Error(`the page never showed "${state}": it shows "${await text('#state')}" / "${await text('#detail')}"`);
  }
}

async function detailMatches(pattern, timeout = 30000) {
  try {
    await page.waitForFunction(([source, flags]) => new RegExp(source, flags)
      .test(document.getElementById('detail').textContent), [pattern.source, pattern.flags], { timeout });
  } catch (e) {
    throw new Error(`the detail never matched ${pattern}: "${await text('#state')}" / "${await text('#detail')}"`);
  }
  return (await text('#detail')).match(pattern);
}

async function ask(question) {
  await submit(question);
  await stateIs('succeeded');
  return run();
}

// Resolves once freeway records `runId` as ended (its events stream closes at its end).
async function ended(runId) {
  const r = await fetch(`${FREEWAY}/v1/runs/${runId}/events`, {
    headers: { Authorization: `Bearer ${API_TOKEN}` },
  });
  assert.equal(r.status, 200, `the run's stream: ${r.status}`);
  assert.match(await r.text(), /event: ?finished/);
}

async function fault(spec) {
  const r = await fetch(`${SIM}/_sim/faults`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, ...spec }),
  });
  assert.equal(r.status, 201, await r.text());
}

let failed = false;
try {
  step('a question is answered in the page, streamed through the run\'s events_url on the public URL');
  await page.goto(APP);
  const first = await ask('hello [[answer:Streamed to the browser]]');
  assert.equal(first.answer, 'Streamed to the browser');
  assert.ok(first.eventsUrl.startsWith(`${PUBLIC}/v1/runs/${first.runId}/events?token=`), first.eventsUrl);
  const streamed = requests.filter((r) => r.url.startsWith(first.eventsUrl));
  assert.ok(streamed.length >= 1, 'the browser opened the stream itself');
  assert.equal(await openStreams(), 0, 'the stream is closed once the run finished');

  step('a second run\'s token does not open the first run\'s stream');
  const second = await ask('again [[answer:Second answer]]');
  assert.notEqual(second.runId, first.runId);
  const token = new URL(second.eventsUrl).searchParams.get('token');
  const crossed = `${FREEWAY}/v1/runs/${first.runId}/events?token=${encodeURIComponent(token)}`;
  assert.equal((await fetch(crossed)).status, 403);
  const own = await fetch(onServer(first.eventsUrl));
  assert.equal(own.status, 200, 'its own token still opens it');
  await own.text();

  step('a delayed run shows "delayed" and a live countdown, then its answer once its rest is cleared');
  await fault({ kind: 'upstream_429', retry_after_s: 90 });
  await submit('later [[answer:Answered after the delay]]');
  await stateIs('delayed');
  const seconds = /retrying in (\d+) s/;
  const shown = Number((await detailMatches(seconds))[1]);
  assert.ok(shown > 30 && shown <= 95, `the countdown starts near the rest's 90 s: ${await text('#detail')}`);
  await page.waitForFunction(([source, from]) => {
    const m = document.getElementById('detail').textContent.match(new RegExp(source));
    return m && Number(m[1]) < from;
  }, [seconds.source, shown], { timeout: 5000 });
  assert.equal(await openStreams(), 1, 'the delayed run\'s stream stays open');
  const route = `platform:openrouter/${MODEL}`;
  const cleared = await fetch(`${FREEWAY}/v1/rests/route/${route}`, {
    method: 'DELETE', headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  assert.equal(cleared.status, 204, await cleared.text());
  await stateIs('succeeded');
  assert.equal(await text('#answer'), 'Answered after the delay');
  assert.equal(await text('#detail'), '', 'the countdown is gone');

  step('a second question closes the first question\'s stream: only its answer is shown');
  await fault({ kind: 'stall', after_chunks: 1, delay_ms: 8000 });
  await submit('slow [[answer:First answer that stalls]]');
  await page.waitForFunction(() => document.getElementById('state').textContent === 'answering'
    && document.getElementById('answer').textContent.length > 0, null, { timeout: 30000 });
  const stalled = await run();
  const stalledStream = (await streamsMade()) - 1;
  assert.equal(await openStreams(), 1, 'one stream, the stalled run\'s');
  await submit('quick [[answer:Only this answer]]');
  await stateIs('succeeded');
  const quick = await run();
  assert.notEqual(quick.runId, stalled.runId);
  assert.equal(quick.answer, 'Only this answer');
  assert.equal(await page.evaluate((i) => window.__streams[i].readyState, stalledStream), 2,
    'the first question\'s stream was closed');
  assert.equal(await openStreams(), 0);
  // The stalled run ends after the second; its end must not reach the page.
  const rest = await (await fetch(onServer(stalled.eventsUrl))).text();
  assert.match(rest, /event: ?finished/, rest);
  assert.equal(await text('#answer'), 'Only this answer');
  assert.equal(await text('#state'), 'succeeded');

  step('a stream freeway refuses (a changed token: 403) is a message, not "queued" for good');
  let tampered;
  await page.route(`${APP}/ask`, async (r) => {
    const resp = await r.fetch();
    const body = await resp.json();
    tampered = body.run_id;
    const url = new URL(body.events_url);
    const [expires, tag] = url.searchParams.get('token').split('.');
    url.searchParams.set('token', `${expires}.${tag[0] === 'A' ? 'B' : 'A'}${tag.slice(1)}`);
    await r.fulfill({ response: resp, json: { ...body, events_url: url.toString() } });
  });
  await submit('tampered [[answer:Never shown]]');
  await stateIs('stream refused');
  await detailMatches(/the live stream was refused \(403\): the events token is not one freeway signed/);
  assert.doesNotMatch(await text('#detail'), /retrying/, 'a forbidden stream is not tried again');
  assert.equal(await openStreams(), 0);
  assert.equal(await text('#answer'), '');
  await page.unroute(`${APP}/ask`);
  // That run still executes; it must have ended before the next step's fault is set, or it
  // could take the stall meant for the next run.
  await ended(tampered);

  step('a stream refused for want of a slot (503) says so, is tried again, and then streams the answer once');
  await fault({ kind: 'stall', after_chunks: 1, delay_ms: 6000 });
  // The run's 4 streams are taken before the page gets its events_url: its own is the fifth.
  const held = [];
  await page.route(`${APP}/ask`, async (r) => {
    const resp = await r.fetch();
    const body = await resp.json();
    for (let i = 0; i < 4; i++) {
      const s = await fetch(onServer(body.events_url));
      held.push({ status: s.status, rest: s.text() });
    }
    await r.fulfill({ response: resp });
  });
  await submit('crowded [[answer:Streamed once a slot was free]]');
  const refusal = await detailMatches(/the live stream was refused \(503\): (.+); retrying in (\d+) s/);
  assert.match(refusal[1], /event streams open already/, refusal[0]);
  assert.equal(await text('#state'), 'stream refused');
  assert.deepEqual(held.map((h) => h.status), [200, 200, 200, 200], 'the four streams were held');
  await page.unroute(`${APP}/ask`);
  for (const h of held) assert.match(await h.rest, /event: ?finished/);
  await stateIs('succeeded');
  assert.equal(await text('#answer'), 'Streamed once a slot was free', 'replayed once, not twice');
  assert.equal(await openStreams(), 0);

  step('a question freeway refuses is a message with freeway\'s code and reason');
  const made = await streamsMade();
  await submit('x'.repeat(300 * 1024));
  await stateIs('refused');
  await detailMatches(/^the question was refused \(413 payload_too_large\): ./);
  assert.equal(await streamsMade(), made, 'no stream for a refused question');

  step('a refusal with retry_after_s (freeway\'s 429, as the app relays it) counts down to the next try');
  // freeway answers this app's enqueue with 429 only past FREEWAY_RATE_LIMIT (its runs queue
  // through rests), which a test cannot hit on cue: the app's relay of it stands in.
  await page.route(`${APP}/ask`, (r) => r.fulfill({
    status: 429,
    json: { error: { code: 'too_many_requests', message: 'too many requests', retry_after_s: 30 } },
  }));
  await submit('refused [[answer:Never shown]]');
  await stateIs('refused');
  const wait = Number((await detailMatches(/too_many_requests\): too many requests; try again in (\d+) s/))[1]);
  assert.ok(wait <= 30 && wait >= 28, await text('#detail'));
  assert.equal(await streamsMade(), made, 'no stream for a refused question');
  await page.unroute(`${APP}/ask`);

  step('no API token in the page or on any of its requests, and no request to freeway\'s server URL');
  assert.ok(!(await page.content()).includes(API_TOKEN), 'the page holds no token');
  for (const r of requests) {
    assert.ok(!r.headers.authorization, `no Authorization header: ${r.url}`);
    assert.ok(!r.url.includes(API_TOKEN), `no token in a URL: ${r.url}`);
    assert.ok(!r.url.startsWith(FREEWAY), `the browser reads freeway at its public URL: ${r.url}`);
  }
  assert.deepEqual(errors, [], 'no script error in the page');
  step('passed');
} catch (error) {
  failed = true;
  console.error(`webapp test FAILED: ${error.stack || error}`);
  await page.screenshot({ path: path.join(os.tmpdir(), 'webapp-failure.png') }).catch(() => {});
} finally {
  await close();
}
process.exit(failed ? 1 : 0);
