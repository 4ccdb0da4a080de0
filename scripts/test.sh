#!/usr/bin/env bash
# The test command: starts a private Redis and PostgreSQL (installing them when missing and run as
# root), installs the board's browser test (chromium, playwright-core), runs the whole workspace's
# tests once, and stops what it started. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh
trap stop_services EXIT
start_redis
start_postgres
ensure_browser
echo "tests use REDIS_URL=$REDIS_URL PG_URL=$PG_URL" >&2
cargo test --workspace "$@"
