// One BullMQ worker process doing what a freeway worker does for a one-step chat run: record
// it as running, make its one provider call (the simulator), then record the attempt, both
// messages and the run's end in one transaction, in PostgreSQL or SQLite. Started by bench.mjs.
import { Worker } from 'bullmq';
import Database from 'better-sqlite3';
import pg from 'pg';

const env = (name) => {
  const value = process.env[name];
  if (!value) {
    console.error(`worker.mjs: ${name} is not set`);
    process.exit(2);
  }
  return value;
};
const redis = new URL(env('REDIS_URL'));
const simUrl = env('SIM_URL');
const queueName = env('BULLMQ_QUEUE');
const concurrency = Number(env('CONCURRENCY'));
// The store: PostgreSQL (PG_URL) or a SQLite file (SQLITE_PATH) the worker processes share, as
// freeway's do.
const store = process.env.SQLITE_PATH ? sqliteStore(process.env.SQLITE_PATH) : postgresStore(env('PG_URL'));

// better-sqlite3 answers synchronously, as a Node worker written against it does: a write holds the
// event loop until it commits. WAL and synchronous=NORMAL, as freeway's store runs SQLite.
function sqliteStore(path) {
  const db = new Database(path, { timeout: 30_000 });
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  const start = db.prepare(
    `INSERT INTO conversations (id, user_id, created_ms, updated_ms) VALUES (?, ?, ?, ?)
     ON CONFLICT (id) DO NOTHING`,
  );
  const startRun = db.prepare(
    `INSERT INTO runs (run_id, user_id, conversation_id, status, job, created_ms, updated_ms)
     VALUES (?, ?, ?, 'running', ?, ?, ?)
     ON CONFLICT (run_id) DO UPDATE SET status = 'running', updated_ms = excluded.updated_ms`,
  );
  const nextSeq = db.prepare(
    'UPDATE conversations SET next_seq = next_seq + 2, updated_ms = ? WHERE id = ? RETURNING next_seq',
  );
  const messages = db.prepare(
    `INSERT INTO messages (id, conversation_id, seq, run_id, msg_key, role, content, created_ms)
     VALUES (?1 || ':u', ?2, ?3, ?1, 'input', 'user', ?4, ?6),
            (?1 || ':a', ?2, ?3 + 1, ?1, 'step1', 'assistant', ?5, ?6)`,
  );
  const attempt = db.prepare(
    `INSERT INTO attempts (run_id, n, route, http_status, latency_ms, created_ms)
     VALUES (?, 1, 'openrouter/openai/gpt-4o-mini', ?, ?, ?)`,
  );
  const endRun = db.prepare(
    `UPDATE runs SET status = 'succeeded', calls = 1, output = ?, prompt_tokens = ?,
     completion_tokens = ?, updated_ms = ? WHERE run_id = ?`,
  );
  const started = db.transaction((run, now) => {
    start.run(run.conversation_id, run.user_id, now, now);
    startRun.run(run.run_id, run.user_id, run.conversation_id, JSON.stringify(run), now, now);
  });
  const finished = db.transaction((run, end) => {
    const now = Date.now();
    const seq = Number(nextSeq.get(now, run.conversation_id).next_seq) - 2;
    // better-sqlite3 binds numbered parameters (?1 … ?6) from an object keyed by number.
    messages.run({ 1: run.run_id, 2: run.conversation_id, 3: seq, 4: run.input, 5: end.answer, 6: now });
    attempt.run(run.run_id, end.status, end.latency, now);
    endRun.run(end.answer, end.usage.prompt_tokens ?? 0, end.usage.completion_tokens ?? 0, now, run.run_id);
  });
  return {
    started: async (run, now) => started(run, now),
    finished: async (run, end) => finished(run, end),
    close: async () => db.close(),
  };
}

function postgresStore(url) {
  const db = new pg.Pool({ connectionString: url, max: Number(process.env.PG_POOL || 8) });
  return {
    started: (run, now) =>
      db.query(
        `WITH c AS (INSERT INTO conversations (id, user_id, created_ms, updated_ms)
                    VALUES ($2, $3, $4, $4) ON CONFLICT (id) DO NOTHING)
         INSERT INTO runs (run_id, user_id, conversation_id, status, job, created_ms, updated_ms)
         VALUES ($1, $3, $2, 'running', $5, $4, $4)
         ON CONFLICT (run_id) DO UPDATE SET status = 'running', updated_ms = $4`,
        [run.run_id, run.conversation_id, run.user_id, now, JSON.stringify(run)],
      ),
    finished: async (run, end) => {
      const client = await db.connect();
      try {
        await client.query('BEGIN');
        const { rows } = await client.query(
          'UPDATE conversations SET next_seq = next_seq + 2, updated_ms = $2 WHERE id = $1 RETURNING next_seq',
          [run.conversation_id, Date.now()],
        );
        const seq = Number(rows[0].next_seq) - 2;
        await client.query(
          `INSERT INTO messages (id, conversation_id, seq, run_id, msg_key, role, content, created_ms)
           VALUES ($1 || ':u', $2, $3, $1, 'input', 'user', $4, $6),
                  ($1 || ':a', $2, $3 + 1, $1, 'step1', 'assistant', $5, $6)`,
          [run.run_id, run.conversation_id, seq, run.input, end.answer, Date.now()],
        );
        await client.query(
          `INSERT INTO attempts (run_id, n, route, http_status, latency_ms, created_ms)
           VALUES ($1, 1, 'openrouter/openai/gpt-4o-mini', $2, $3, $4)`,
          [run.run_id, end.status, end.latency, Date.now()],
        );
        await client.query(
          `UPDATE runs SET status = 'succeeded', calls = 1, output = $2, prompt_tokens = $3,
           completion_tokens = $4, updated_ms = $5 WHERE run_id = $1`,
          [run.run_id, end.answer, end.usage.prompt_tokens ?? 0, end.usage.completion_tokens ?? 0, Date.now()],
        );
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      } finally {
        client.release();
      }
    },
    close: () => db.end(),
  };
}

async function run(job) {
  const { input } = job.data;
  await store.started(job.data, Date.now());
  const started = Date.now();
  const response = await fetch(`${simUrl}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-or-v1-bullmq-peer' },
    body: JSON.stringify({ model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: input }] }),
  });
  const body = await response.json();
  if (!response.ok) throw new Error(`provider answered ${response.status}`);
  const answer = body.choices?.[0]?.message?.content ?? '';
  await store.finished(job.data, {
    answer,
    usage: body.usage ?? {},
    status: response.status,
    latency: Date.now() - started,
  });
  return { answer };
}

const worker = new Worker(queueName, run, {
  connection: { host: redis.hostname, port: Number(redis.port || 6379) },
  concurrency,
  // freeway keeps a finished delivery's record five minutes, then vacuums it.
  removeOnComplete: { age: 300 },
  removeOnFail: { age: 3600 },
});
worker.on('ready', () => console.log('ready'));
worker.on('failed', (job, error) => console.error(`run ${job?.id} failed: ${error.message}`));
const stop = async () => {
  await worker.close();
  await store.close();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
