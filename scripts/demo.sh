#!/usr/bin/env bash
# The demo: a local Redis (unless REDIS_URL is set), the simulator playing OpenRouter (a small
# shared free quota), Groq (a small per-model pool) and a paid provider, configured through
# FREEWAY_CONFIG (unless OPENROUTER_API_KEY is set, then the real OpenRouter with a small batch),
# two worker replicas and the web API; a batch of runs that shows rests, delayed runs, failover
# between free tiers of different shapes and completion; then a summary and the board URL.
#
#   scripts/demo.sh            the demo (release build)
#   scripts/demo.sh --short    a smaller batch (CI runs this, with --debug to reuse the test build)
#   scripts/demo.sh --keep     leave everything running at the end, until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh

profile=release short=0 keep=0
for arg in "$@"; do
    case "$arg" in
        --short) short=1 ;;
        --debug) profile=debug ;;
        --keep) keep=1 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "demo: unknown option $arg (see --help)" >&2; exit 2 ;;
    esac
done

bin=target/$profile
if [ "$profile" = release ]; then
    echo "building (release) ..." >&2
    cargo build --release -q -p worker -p producer -p sim
else
    cargo build -q -p worker -p producer -p sim
fi

DEMO_DIR=$(mktemp -d -t freeway-demo-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    stop_services
    rm -rf "$DEMO_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -n "${REDIS_URL:-}" ] || start_redis aof
export FREEWAY_NAMESPACE="demo-$(date +%s)"
export DATABASE_URL="sqlite://$DEMO_DIR/freeway.db"
export FREEWAY_SECRET_KEY=${FREEWAY_SECRET_KEY:-$(python3 -c 'import secrets; print(secrets.token_hex(32))')}
export RUST_LOG=${RUST_LOG:-info}

if [ -z "${OPENROUTER_API_KEY:-}" ]; then
    sim_port=$(free_port)
    # 4 free OpenRouter requests and 2 Groq requests per 10 s window: both free tiers run out
    # within seconds, each in its own shape.
    "$bin/sim" --addr "127.0.0.1:$sim_port" --rpm 4 --groq-rpm 2 --window-s 10 --latency-ms 150 \
        --token-rate 200 --freeway-config "$DEMO_DIR/freeway.toml" \
        >"$DEMO_DIR/sim.out" 2>"$DEMO_DIR/sim.log" &
    pids+=($!)
    export OPENROUTER_BASE_URL="http://127.0.0.1:$sim_port/api/v1"
    export OPENROUTER_API_KEY="sk-or-v1-demo-platform-key"
    export GROQ_API_KEY="gsk_demo_platform_key" PAID_API_KEY="sk-demo-paid-key"
    # The simulator writes the configuration that names its Groq, Gemini and paid provider.
    for _ in $(seq 100); do [ -s "$DEMO_DIR/freeway.toml" ] && break; sleep 0.1; done
    [ -s "$DEMO_DIR/freeway.toml" ] || { echo "demo: the simulator did not start" >&2; exit 1; }
    export FREEWAY_CONFIG="$DEMO_DIR/freeway.toml"
    export DEMO_SIM_URL="http://127.0.0.1:$sim_port"
    mode=sim
else
    mode=openrouter
fi

for n in 1 2; do
    "$bin/worker" --concurrency 32 >"$DEMO_DIR/worker-$n.log" 2>&1 &
    pids+=($!)
done
api_port=$(free_port)
"$bin/producer" serve --addr "127.0.0.1:$api_port" >"$DEMO_DIR/producer.log" 2>&1 &
pids+=($!)

export DEMO_API="http://127.0.0.1:$api_port"
export DEMO_MODE=$mode DEMO_SHORT=$short DEMO_DIR
status=0
python3 scripts/demo.py || status=$?
if [ "$status" -ne 0 ]; then
    echo "demo failed; the last log lines:" >&2
    tail -n 5 "$DEMO_DIR"/*.log >&2 || true
    exit "$status"
fi
if [ "$keep" = 1 ]; then
    echo "everything keeps running; the board is at $DEMO_API/board. Ctrl-C to stop." >&2
    wait
fi
