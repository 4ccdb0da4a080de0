// BullMQ doing the durable work of freeway's load benchmark, throughput scenario
// (`target/release/examples/load --scenario throughput`): N one-step chat runs pushed while no
// worker runs, then drained by R worker processes × C concurrency, each run one call to the
// simulator and its records in a SQLite file the workers share, or in PostgreSQL with
// `--store postgres` (worker.mjs). Prints runs/s and the CPU a run of the workers, Redis and
// PostgreSQL, measured as freeway's benchmark measures its own. `scripts/peer.py` runs it
// interleaved with freeway's and prints both side by side.
//
//   npm ci --prefix benches/bullmq
//   REDIS_URL=redis://127.0.0.1:6379 node benches/bullmq/bench.mjs --runs 10000 --replicas 2 \
//     --concurrency 64 --sim target/release/sim
//   REDIS_URL=… PG_URL=postgres://user@127.0.0.1:5432/postgres node benches/bullmq/bench.mjs \
//     --store postgres --replicas 3
import Database from 'better-sqlite3';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = fileURLToPath(new URL('.', import.meta.url));
const { values: opts } = parseArgs({
  options: {
    runs: { type: 'string', default: '10000' },
    replicas: { type: 'string', default: '3' },
    concurrency: { type: 'string', default: '64' },
    sim: { type: 'string', default: 'target/release/sim' },
    store: { type: 'string', default: 'sqlite' },
    help: { type: 'boolean', default: false },
  },
});
if (opts.help) {
  console.log(readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\nimport')[0]);
  process.exit(0);
}
const fail = (message) => {
  console.error(`bench.mjs: ${message}`);
  process.exit(2);
};
const [runs, replicas, concurrency] = ['runs', 'replicas', 'concurrency'].map((name) => {
  const n = Number(opts[name]);
  if (!Number.isInteger(n) || n < 1) fail(`--${name} must be a positive integer`);
  return n;
});
const redisUrl = process.env.REDIS_URL || fail('REDIS_URL is not set');
if (!['sqlite', 'postgres'].includes(opts.store)) fail('--store must be sqlite or postgres');
const onPostgres = opts.store === 'postgres';
const pgUrl = onPostgres
  ? process.env.PG_URL || fail('PG_URL is not set (a server this user may create databases on)')
  : undefined;
const redis = new URL(redisUrl);
const connection = { host: redis.hostname, port: Number(redis.port || 6379) };

const TICKS_PER_S = 100;
const SUCCEEDED = "SELECT count(*) AS n FROM runs WHERE status = 'succeeded'";
const cpuOf = (pid) => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_S;
  } catch {
    return 0;
  }
};
const postgresCpu = () =>
  readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'postgres';
      } catch {
        return false;
      }
    })
    .reduce((sum, pid) => sum + cpuOf(pid), 0);
const redisReadings = async (client) => {
  const info = await client.info('all');
  const field = (name) => Number((info.match(new RegExp(`^${name}:([\\d.]+)`, 'm')) || [])[1] || 0);
  return { cpu: field('used_cpu_user') + field('used_cpu_sys'), commands: field('total_commands_processed') };
};
const freePort = () =>
  new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
const lines = (child, wanted) =>
  new Promise((resolve, reject) => {
    child.on('exit', (code) => reject(new Error(`a child exited (${code}) before saying ${wanted}`)));
    createInterface({ input: child.stdout }).on('line', (line) => line.includes(wanted) && resolve());
  });

// A database of its own: on the server, or a SQLite file in a folder of its own.
const database = `bullmq_peer_${process.pid}`;
const schema = readFileSync(`${here}/schema.sql`, 'utf8');
let admin;
let db;
let storeEnv;
if (onPostgres) {
  admin = new pg.Client({ connectionString: pgUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${database}`);
  const dbUrl = new URL(pgUrl);
  dbUrl.pathname = `/${database}`;
  const client = new pg.Client({ connectionString: dbUrl.toString() });
  await client.connect();
  await client.query(schema);
  db = {
    succeeded: async () => Number((await client.query(SUCCEEDED)).rows[0].n),
    close: async () => {
      await client.end();
      await admin.query(`DROP DATABASE ${database} WITH (FORCE)`);
      await admin.end();
    },
  };
  storeEnv = { PG_URL: dbUrl.toString() };
} else {
  const dir = mkdtempSync(join(tmpdir(), 'bullmq-peer-'));
  // The file goes with the benchmark, whether it ends well or not.
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'store.db');
  const file = new Database(path);
  file.pragma('journal_mode = WAL');
  file.exec(schema);
  db = {
    succeeded: async () => Number(file.prepare(SUCCEEDED).get().n),
    close: async () => file.close(),
  };
  storeEnv = { SQLITE_PATH: path };
}

const simPort = await freePort();
const sim = spawn(opts.sim, ['--addr', `127.0.0.1:${simPort}`], { stdio: ['ignore', 'ignore', 'inherit'] });
// Children do not outlive a benchmark that failed half-way.
const children = [sim];
process.on('exit', () => children.forEach((child) => child.exitCode === null && child.kill('SIGKILL')));
for (let i = 0; ; i++) {
  try {
    await fetch(`http://127.0.0.1:${simPort}/api/v1/key`);
    break;
  } catch {
    if (i > 200) fail(`the simulator (${opts.sim}) did not start`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const name = `peer-${process.pid}`;
const queue = new Queue(name, { connection });
// Readings come over a connection of their own, outside BullMQ's.
const client = new Redis(redisUrl);
console.log(
  `bullmq: ${runs} chat runs, ${replicas} worker processes × concurrency ${concurrency}, ${onPostgres ? 'PostgreSQL' : 'SQLite'} store`,
);
let started = performance.now();
for (let i = 0; i < runs; i += 1000) {
  const batch = [];
  for (let j = i; j < Math.min(i + 1000, runs); j++) {
    const run_id = `run-${process.pid}-${j}`;
    batch.push({
      name: 'run',
      data: { run_id, user_id: `user-${j % 100}`, conversation_id: `conv-${run_id}`, input: 'Say something about load testing, please.' },
      opts: { jobId: run_id, removeOnComplete: { age: 300 } },
    });
  }
  await queue.addBulk(batch);
}
const pushS = (performance.now() - started) / 1000;
console.log(`  enqueue          ${runs} runs in ${pushS.toFixed(2)} s = ${Math.round(runs / pushS)} runs/s (addBulk, no worker running)`);

const before = { redis: await redisReadings(client), postgres: postgresCpu() };
started = performance.now();
const workers = Array.from({ length: replicas }, () =>
  spawn(process.execPath, [`${here}/worker.mjs`], {
    env: { ...process.env, SIM_URL: `http://127.0.0.1:${simPort}`, BULLMQ_QUEUE: name, CONCURRENCY: String(concurrency), ...storeEnv },
    stdio: ['ignore', 'pipe', 'inherit'],
  }),
);
children.push(...workers);
await Promise.all(workers.map((w) => lines(w, 'ready')));
let counts;
for (;;) {
  counts = await queue.getJobCounts('completed', 'failed');
  if (counts.completed + counts.failed >= runs) break;
  await new Promise((r) => setTimeout(r, 10));
}
const drainS = (performance.now() - started) / 1000;
const workersCpu = workers.map((w) => cpuOf(w.pid));
const after = { redis: await redisReadings(client), postgres: postgresCpu() };
const succeeded = await db.succeeded();

const perRun = (s) => ((1000 * s) / runs).toFixed(3);
const redisCpu = after.redis.cpu - before.redis.cpu;
const postgres = after.postgres - before.postgres;
const workersSum = workersCpu.reduce((a, b) => a + b, 0);
console.log(`  drained          ${runs} runs in ${drainS.toFixed(2)} s = ${Math.round(runs / drainS)} runs/s (from worker start); ${counts.failed} failed; ${succeeded} succeeded in the store`);
console.log(`  cpu              redis ${redisCpu.toFixed(2)} s, workers ${workersCpu.map((s) => s.toFixed(2)).join(' + ')} s, postgres ${postgres.toFixed(2)} s (all its processes)`);
console.log(`  redis            ${((after.redis.commands - before.redis.commands) / runs).toFixed(1)} commands a run`);
console.log(`  pipeline         ${perRun(workersSum + redisCpu + postgres)} ms of CPU a run (workers ${perRun(workersSum)}, redis ${perRun(redisCpu)}, postgres ${perRun(postgres)})`);

for (const w of workers) w.kill('SIGTERM');
await Promise.all(workers.map((w) => new Promise((r) => (w.exitCode !== null ? r() : w.on('exit', r)))));
sim.kill('SIGTERM');
await queue.obliterate({ force: true });
await queue.close();
client.disconnect();
await db.close();
if (succeeded !== runs) fail(`${runs - succeeded} runs did not succeed`);
