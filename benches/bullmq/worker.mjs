// One BullMQ worker process doing what a freeway worker does for a one-step chat run: record
// it as running, make its one provider call (the simulator), then record the attempt, both
// messages and the run's end in one transaction. Started by bench.mjs.
import { Worker } from 'bullmq';
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
const db = new pg.Pool({ connectionString: env('PG_URL'), max: Number(process.env.PG_POOL || 8) });

async function run(job) {
  const { run_id, user_id, conversation_id, input } = job.data;
  const now = Date.now();
  await db.query(
    `WITH c AS (INSERT INTO conversations (id, user_id, created_ms, updated_ms)
                VALUES ($2, $3, $4, $4) ON CONFLICT (id) DO NOTHING)
     INSERT INTO runs (run_id, user_id, conversation_id, status, job, created_ms, updated_ms)
     VALUES ($1, $3, $2, 'running', $5, $4, $4)
     ON CONFLICT (run_id) DO UPDATE SET status = 'running', updated_ms = $4`,
    [run_id, conversation_id, user_id, now, JSON.stringify(job.data)],
  );
  const started = Date.now();
  const response = await fetch(`${simUrl}/api/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer sk-or-v1-bullmq-peer' },
    body: JSON.stringify({ model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: input }] }),
  });
  const body = await response.json();
  if (!response.ok) throw new Error(`provider answered ${response.status}`);
  const answer = body.choices?.[0]?.message?.content ?? '';
  const usage = body.usage ?? {};
  const latency = Date.now() - started;
  const client = await db.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query(
      'UPDATE conversations SET next_seq = next_seq + 2, updated_ms = $2 WHERE id = $1 RETURNING next_seq',
      [conversation_id, Date.now()],
    );
    const seq = Number(rows[0].next_seq) - 2;
    await client.query(
      `INSERT INTO messages (id, conversation_id, seq, run_id, msg_key, role, content, created_ms)
       VALUES ($1 || ':u', $2, $3, $1, 'input', 'user', $4, $6),
              ($1 || ':a', $2, $3 + 1, $1, 'step1', 'assistant', $5, $6)`,
      [run_id, conversation_id, seq, input, answer, Date.now()],
    );
    await client.query(
      `INSERT INTO attempts (run_id, n, route, http_status, latency_ms, created_ms)
       VALUES ($1, 1, 'openrouter/openai/gpt-4o-mini', $2, $3, $4)`,
      [run_id, response.status, latency, Date.now()],
    );
    await client.query(
      `UPDATE runs SET status = 'succeeded', calls = 1, output = $2, prompt_tokens = $3,
       completion_tokens = $4, updated_ms = $5 WHERE run_id = $1`,
      [run_id, answer, usage.prompt_tokens ?? 0, usage.completion_tokens ?? 0, Date.now()],
    );
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw error;
  } finally {
    client.release();
  }
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
  await db.end();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
