// What the browser scripts share: their settings from the environment, waiting for a condition
// instead of for a time, JSON over HTTP with a bearer token, and a headless Chromium of its own
// profile (removed by `close`).

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

/** The variable `name`, which the Rust test that runs the script must set. */
export function need(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Poll `check` until it returns a truthy value, which is returned; fail after `ms` naming `what`. */
export async function until(what, check, ms = 15000) {
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

/** `{status, body}` of a JSON request, with `Authorization: Bearer token` when there is one. */
export async function http(method, url, { token, body } = {}) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const resp = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  return { status: resp.status, body: text ? JSON.parse(text) : null };
}

/** Headless Chromium (`CHROMIUM`, else Debian's) with a fresh profile; `extraArgs` are its flags. */
export async function launch(name, { viewport, extraArgs = [] } = {}) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `freeway-${name}-chromium-`));
  const context = await chromium.launchPersistentContext(dataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', ...extraArgs],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const close = async () => {
    await context.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  };
  return { context, page, close };
}
