// The example's build: freeway's OpenAPI document (from `producer openapi`, the binary named by
// FREEWAY_PRODUCER, default the workspace's debug build), the client's types generated from it
// by openapi-typescript, the server compiled by tsc, and the page beside it. Nothing generated
// is committed: each build takes the document of the freeway it is built against.

import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const producer = process.env.FREEWAY_PRODUCER || path.join(here, '../../target/debug/producer');
const bin = (name) => path.join(here, 'node_modules/.bin', name);
const run = (cmd, args) => execFileSync(cmd, args, { cwd: here, stdio: ['ignore', 'pipe', 'inherit'] });

let document;
try {
  document = run(producer, ['openapi']);
} catch (e) {
  console.error(`build: cannot run ${producer} openapi (set FREEWAY_PRODUCER): ${e.message}`);
  process.exit(2);
}
writeFileSync(path.join(here, 'openapi.json'), document);
run(bin('openapi-typescript'), ['openapi.json', '--output', 'src/freeway.d.ts']);
run(bin('tsc'), ['-p', 'tsconfig.json']);
mkdirSync(path.join(here, 'dist'), { recursive: true });
// The page and the settings' text are the Rust twin's (producer/examples/webapp.rs).
for (const file of ['page.html', 'usage.txt']) copyFileSync(path.join(here, '../webapp', file), path.join(here, 'dist', file));
console.error('build: dist/server.js, typed by the client generated from freeway\'s document');
