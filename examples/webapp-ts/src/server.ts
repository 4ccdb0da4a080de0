// A web app that streams a freeway run's answer in its users' browsers, without ever giving a
// browser the API token: the TypeScript twin of producer/examples/webapp.rs, with the same page
// (examples/webapp/page.html), the same routes and the same settings.
//
// The server holds FREEWAY_API_TOKEN and enqueues a run for the user's question (`POST /ask` →
// freeway's `POST /v1/runs`, through the client generated from freeway's OpenAPI document, so
// the compiler checks the body and the answer); it hands the browser only the run's signed
// `events_url`, which opens that run's event stream and nothing else.
//
//   FREEWAY_URL=http://127.0.0.1:8080 FREEWAY_API_TOKEN=… node dist/server.js 127.0.0.1:3000

import { readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import createClient from 'openapi-fetch';
import type { components, paths } from './freeway.js';

type ErrorDetail = components['schemas']['ErrorDetail'];
type RunRequest = components['schemas']['RunRequest'];

// The settings, shared with the Rust twin.
const USAGE = readFileSync(path.join(path.dirname(fileURLToPath(import.meta.url)), 'usage.txt'), 'utf8');
// How long the server waits on freeway for an enqueue or a stream check: a page must not stay
// "asking" because freeway hangs.
const FREEWAY_TIMEOUT_MS = 15_000;
// The largest question body this app reads (as axum's default for the Rust twin): a longer
// question is freeway's to refuse, with its own 413.
const MAX_BODY = 2 * 1024 * 1024;

interface Settings {
  addr: { host: string; port: number };
  server: string;
  public: string;
  token: string;
  provider: string;
  model: string;
}

class BadSetting extends Error {}

// A base URL setting: http(s), without a query; returned without its trailing `/`.
function baseUrl(name: string, value: string): string {
  const bad = () =>
    new BadSetting(
      `${name} must be an http(s) base URL such as http://127.0.0.1:8080, got ${JSON.stringify(value)}`,
    );
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw bad();
  }
  if (!['http:', 'https:'].includes(url.protocol) || url.search !== '' || url.host === '') throw bad();
  return value.replace(/\/+$/, '');
}

function settings(argv: string[], env: NodeJS.ProcessEnv): Settings {
  const [addr = '127.0.0.1:3000', extra] = argv;
  if (extra !== undefined) throw new BadSetting(`unexpected argument ${JSON.stringify(extra)}; see --help`);
  if (addr.startsWith('-')) throw new BadSetting(`unknown option ${JSON.stringify(addr)}; see --help`);
  const colon = addr.lastIndexOf(':');
  const host = addr.slice(0, colon);
  const port = Number(addr.slice(colon + 1));
  if (colon <= 0 || !/^\d{1,5}$/.test(addr.slice(colon + 1)) || port > 65535) {
    throw new BadSetting(`ADDR must be HOST:PORT such as 127.0.0.1:3000, got ${JSON.stringify(addr)}`);
  }
  const value = (name: string) => {
    const v = env[name];
    return v !== undefined && v.trim() !== '' ? v : undefined;
  };
  const need = (name: string, what: string) => {
    const v = value(name);
    if (v === undefined) throw new BadSetting(`${name} is not set (${what}); see --help`);
    return v;
  };
  const server = baseUrl('FREEWAY_URL', need('FREEWAY_URL', "freeway's base URL as this server reaches it"));
  const publicUrl = value('FREEWAY_PUBLIC_URL');
  const token = need('FREEWAY_API_TOKEN', "freeway's API token");
  const provider = value('FREEWAY_PROVIDER') ?? 'openrouter';
  if (!/^[a-z0-9_-]{1,64}$/.test(provider)) {
    throw new BadSetting(
      `FREEWAY_PROVIDER must be a provider's name (1-64 of [a-z0-9_-]), got ${JSON.stringify(provider)}`,
    );
  }
  return {
    addr: { host: host.replace(/^\[|\]$/g, ''), port },
    server,
    public: publicUrl === undefined ? server : baseUrl('FREEWAY_PUBLIC_URL', publicUrl),
    token,
    provider,
    model: value('FREEWAY_MODEL') ?? 'openrouter/free',
  };
}

function send(res: http.ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

// An error as freeway words its own, so the page reads one shape whoever refused.
function fail(res: http.ServerResponse, status: number, code: string, message: string) {
  send(res, status, { error: { code, message } });
}

function retryAfter(response: Response): number | undefined {
  const header = response.headers.get('retry-after')?.trim();
  return header !== undefined && /^\d+$/.test(header) ? Number(header) : undefined;
}

// freeway's refusal, relayed with its status: its code, message and `retry_after_s` (from the
// body, else from `Retry-After`). A body that is not freeway's (a proxy's page) is named.
function relay(status: number, error: Partial<ErrorDetail> | undefined, retry?: number) {
  const relayed: { code: string; message: string; retry_after_s?: number } = {
    code: typeof error?.code === 'string' ? error.code : 'upstream_error',
    message: typeof error?.message === 'string' ? error.message : `freeway answered ${status}`,
  };
  const seconds = typeof error?.retry_after_s === 'number' ? error.retry_after_s : retry;
  if (seconds !== undefined) relayed.retry_after_s = seconds;
  return relayed;
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) return undefined;
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    return undefined;
  }
}

function field(body: unknown, name: string): string | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const value = (body as Record<string, unknown>)[name];
  return typeof value === 'string' ? value : undefined;
}

function app(config: Settings) {
  const page = readFileSync(path.join(path.dirname(fileURLToPath(import.meta.url)), 'page.html'));
  const freeway = createClient<paths>({
    baseUrl: config.server,
    headers: { Authorization: `Bearer ${config.token}` },
  });
  // The events check asks as the browser did: with the run's signed token, not the API token.
  const anonymous = createClient<paths>({ baseUrl: config.server });
  const unreachable = (res: http.ServerResponse, e: unknown) => {
    console.error(`webapp: cannot reach freeway at ${config.server}: ${(e as Error).message}`);
    fail(res, 502, 'unavailable', 'freeway cannot be reached; try again');
  };

  // Enqueue a run for the question, as the user `web-user` (a real app names its signed-in
  // user), and answer with the run's id and its events URL on freeway's public address.
  async function ask(req: http.IncomingMessage, res: http.ServerResponse) {
    const question = field(await readJson(req), 'question');
    if (question === undefined || question.trim() === '') {
      return fail(res, 400, 'invalid_request', 'a question is required');
    }
    const run: RunRequest = {
      user_id: 'web-user',
      input: question,
      routes: [{ provider: config.provider, model: config.model }],
      // While the route rests the run waits rather than being refused: the page shows the
      // delay and counts down to its end.
      on_rest: 'queue',
    };
    let answer;
    try {
      answer = await freeway.POST('/v1/runs', { body: run, signal: AbortSignal.timeout(FREEWAY_TIMEOUT_MS) });
    } catch (e) {
      return unreachable(res, e);
    }
    const { data, error, response } = answer;
    if (response.status !== 202 || data === undefined) {
      const refusal = relay(response.status, (error as { error?: ErrorDetail } | undefined)?.error, retryAfter(response));
      console.error(`webapp: freeway refused the run (${response.status}): ${JSON.stringify(refusal)}`);
      return send(res, response.status >= 400 ? response.status : 502, { error: refusal });
    }
    if (!data.events_url.includes('token=')) {
      // Without one the browser would get 401 from freeway and never know why.
      console.error('webapp: freeway signs no events_url: it needs FREEWAY_SECRET_KEY');
      return fail(res, 502, 'not_configured', 'the run was enqueued, but freeway gave no events URL a browser may open');
    }
    send(res, 200, { run_id: data.run_id, events_url: `${config.public}${data.events_url}` });
  }

  // The run and token of an events URL this app gave a page; undefined for anything else, so
  // the check below never fetches another URL a page names.
  function signedRun(eventsUrl: string): { id: string; token: string } | undefined {
    if (!eventsUrl.startsWith(config.public)) return undefined;
    const match = /^\/v1\/runs\/([A-Za-z0-9_-]{1,64})\/events\?token=([A-Za-z0-9\-_.~%]{1,512})$/.exec(
      eventsUrl.slice(config.public.length),
    );
    return match?.[1] !== undefined && match[2] !== undefined
      ? { id: match[1], token: decodeURIComponent(match[2]) }
      : undefined;
  }

  // Why a page's EventSource was refused: the same URL asked again from here, where freeway's
  // status, message and Retry-After can be read (a browser gets no CORS headers on a refusal,
  // so a page cannot). `{"status": 200}` when the stream opens now.
  async function checkEvents(req: http.IncomingMessage, res: http.ServerResponse) {
    const url = field(await readJson(req), 'events_url');
    const run = url === undefined ? undefined : signedRun(url);
    if (run === undefined) {
      return fail(res, 400, 'invalid_request', "events_url must be a run's events URL as this app gave it");
    }
    let answer;
    try {
      answer = await anonymous.GET('/v1/runs/{id}/events', {
        params: { path: { id: run.id }, query: { token: run.token } },
        parseAs: 'stream',
        signal: AbortSignal.timeout(FREEWAY_TIMEOUT_MS),
      });
    } catch (e) {
      return unreachable(res, e);
    }
    const { response } = answer;
    if (response.ok) {
      // Dropped unread: the stream's slot is freeway's again as soon as it sees us go.
      await response.body?.cancel();
      return send(res, 200, { status: response.status });
    }
    const error = (answer.error as { error?: ErrorDetail } | undefined)?.error;
    send(res, 200, { ...relay(response.status, error, retryAfter(response)), status: response.status });
  }

  return http.createServer((req, res) => {
    const route = `${req.method} ${req.url}`;
    let handled: Promise<void>;
    switch (route) {
      case 'GET /':
        res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' }).end(page);
        return;
      case 'POST /ask':
        handled = ask(req, res);
        break;
      case 'POST /events-check':
        handled = checkEvents(req, res);
        break;
      default:
        fail(res, 404, 'not_found', `no route for ${req.url}`);
        return;
    }
    handled.catch((e: unknown) => {
      console.error(`webapp: ${route}: ${(e as Error).message}`);
      if (!res.headersSent) fail(res, 500, 'internal', 'this app failed; try again');
    });
  });
}

function main() {
  const argv = process.argv.slice(2);
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(USAGE);
    return;
  }
  let config: Settings;
  try {
    config = settings(argv, process.env);
  } catch (e) {
    if (!(e instanceof BadSetting)) throw e;
    console.error(`webapp: ${e.message}`);
    process.exit(2);
  }
  const server = app(config);
  server.on('error', (e) => {
    console.error(`webapp: cannot listen on ${config.addr.host}:${config.addr.port}: ${e.message}`);
    process.exit(1);
  });
  server.listen(config.addr.port, config.addr.host, () => {
    console.error(`webapp: http://${config.addr.host}:${config.addr.port}`);
  });
  const stop = () => server.close(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main();
