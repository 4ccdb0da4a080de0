#!/usr/bin/env bash
# The test command: starts a private Redis and PostgreSQL (installing them when missing and run as
# root), installs the browser tests' chromium and packages and the OTLP receiver's Python
# package, runs the whole workspace's
# tests once, checks the OpenAPI document (a validator, and a Python client generated from it),
# then the suites that touch Redis (rests, pace, spend, the queue end to end, the API
# and its event streams, the fleet of processes) once more on a Redis Cluster of six nodes, then
# kills a primary of that cluster under load (producer/tests/processes/failover.rs), and stops what it
# started. Extra arguments go to `cargo test`. `--quick` first runs only what needs no service.
# Both start with the tests of the tree check (scripts/check_tree.py), which take a second.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/test_check_tree.py
if [ "${1:-}" = --quick ]; then
    # The inner loop (docs/contributing.md): what needs no service, started nowhere — the core's
    # units, the engine on the simulator, the store on SQLite, classification, the properties,
    # the simulator's own tests and the other crates' unit tests. The core's suites that need
    # Redis or PostgreSQL skip, saying so, unless REDIS_URL or PG_URL names one.
    shift
    cargo test -p freeway -p sim "$@"
    cargo test -p queue -p worker -p producer --lib --bins "$@"
    exit
fi
. scripts/services.sh
trap stop_services EXIT
start_redis
start_postgres
ensure_browser
ensure_otlp_receiver
echo "tests use REDIS_URL=$REDIS_URL PG_URL=$PG_URL" >&2
cargo test --workspace "$@"
scripts/check_openapi.sh
start_redis_cluster
echo "the Redis suites again on a cluster: REDIS_URL=$REDIS_CLUSTER_URL" >&2
REDIS_URL=$REDIS_CLUSTER_URL cargo test -p worker --test queue_e2e -p producer --test api "$@"
REDIS_URL=$REDIS_CLUSTER_URL cargo test -p freeway --test fleet "$@" -- rests:: pace:: spend::
REDIS_URL=$REDIS_CLUSTER_URL cargo test -p producer --test processes "$@" -- fleet::
# Last: it kills one of the cluster's primaries.
REDIS_URL=$REDIS_CLUSTER_URL REDIS_CLUSTER_PORTS=$REDIS_CLUSTER_PORTS \
    cargo test -p producer --test processes "$@" -- failover::
