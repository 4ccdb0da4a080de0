# Shared by scripts/test.sh and the demo: install and start the servers freeway needs, on free
# loopback ports, and stop them on exit. Source it; it defines functions only.

# Install Debian packages that are missing (needs root; says what to do otherwise).
ensure_packages() {
    local missing=()
    for pair in "$@"; do
        local cmd=${pair%%:*} pkg=${pair##*:}
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    install_packages "${missing[@]}"
}

install_packages() {
    if [ "$(id -u)" != 0 ]; then
        echo "missing: $*; install them with: sudo apt-get install -y $*" >&2
        return 1
    fi
    echo "installing $* ..." >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Start a throwaway redis-server on a free loopback port; exports REDIS_URL. `start_redis aof`
# runs it as a deployment should, with its append-only file on (the demo does).
start_redis() {
    local aof=no
    [ "${1:-}" = aof ] && aof=yes
    ensure_packages redis-server:redis-server || return 1
    SERVICES_DIR=${SERVICES_DIR:-$(mktemp -d)}
    REDIS_PORT=$(free_port)
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly "$aof" \
        --dir "$SERVICES_DIR" --daemonize yes --pidfile "$SERVICES_DIR/redis.pid" \
        --logfile "$SERVICES_DIR/redis.log" >/dev/null
    for _ in $(seq 1 100); do
        redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    redis-cli -p "$REDIS_PORT" ping >/dev/null || { echo "redis did not start" >&2; return 1; }
    export REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
}

# Start a throwaway Redis Cluster on loopback: 6 redis-servers with cluster mode on, joined by
# `redis-cli --cluster create` as 3 primaries with a replica each; exports REDIS_CLUSTER_URL
# (`redis+cluster://` and every node) and REDIS_CLUSTER_PORTS. Failover is quick (node timeout
# 2 s) so that a test can kill a primary and wait for its replica to take over.
start_redis_cluster() {
    ensure_packages redis-server:redis-server redis-cli:redis-tools || return 1
    SERVICES_DIR=${SERVICES_DIR:-$(mktemp -d)}
    local nodes=() ports=() port dir
    for n in 1 2 3 4 5 6; do
        port=$(free_port)
        dir="$SERVICES_DIR/cluster-$port"
        mkdir -p "$dir"
        # The bus port is named: its default, port + 10000, is past 65535 for a high free port.
        redis-server --port "$port" --cluster-port "$(free_port)" --bind 127.0.0.1 --save '' --appendonly no \
            --repl-diskless-sync-delay 0 \
            --cluster-enabled yes --cluster-config-file "$dir/nodes.conf" --cluster-node-timeout 2000 \
            --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
        ports+=("$port")
        nodes+=("127.0.0.1:$port")
    done
    for port in "${ports[@]}"; do
        for _ in $(seq 1 100); do
            redis-cli -p "$port" ping >/dev/null 2>&1 && break
            sleep 0.05
        done
    done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$SERVICES_DIR/cluster-create.log" 2>&1 ||
        { echo "redis-cli --cluster create failed: see $SERVICES_DIR/cluster-create.log" >&2; return 1; }
    for _ in $(seq 1 200); do
        redis-cli -p "${ports[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok' && break
        sleep 0.05
    done
    redis-cli -p "${ports[0]}" cluster info | grep -q 'cluster_state:ok' ||
        { echo "the cluster did not come up: see $SERVICES_DIR/cluster-create.log" >&2; return 1; }
    # Every replica in sync with its primary, so that a failover has a replica to promote from
    # the start (one still syncing refuses to stand in for a primary that died).
    local synced
    for _ in $(seq 1 400); do
        synced=0
        for port in "${ports[@]}"; do
            redis-cli -p "$port" info replication 2>/dev/null | grep -q 'master_link_status:up' && synced=$((synced + 1))
        done
        [ "$synced" = 3 ] && break
        sleep 0.05
    done
    [ "$synced" = 3 ] || { echo "the cluster's replicas did not sync" >&2; return 1; }
    REDIS_CLUSTER_PORTS="${ports[*]}"
    local IFS=,
    export REDIS_CLUSTER_URL="redis+cluster://${nodes[*]}"
    export REDIS_CLUSTER_PORTS
}

# The directory of PostgreSQL's server binaries (initdb, pg_ctl). Debian keeps them out of PATH in
# /usr/lib/postgresql/<version>/bin; the newest version wins.
pg_bindir() {
    local pg_ctl dir
    if pg_ctl=$(command -v pg_ctl) && command -v initdb >/dev/null 2>&1; then
        dirname "$(readlink -f "$pg_ctl")"
        return 0
    fi
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ] && { echo "$dir"; return 0; }
    done
    return 1
}

# `pg_server start|stop DIR`: start, or stop (fast: sessions are cut), the cluster start_postgres
# made in DIR. A test's outage is a real server going away.
pg_server() {
    local bin as=()
    bin=$(pg_bindir) || { echo "PostgreSQL server binaries not found" >&2; return 1; }
    [ "$(id -u)" = 0 ] && as=(runuser -u postgres --)
    case $1 in
        start) "${as[@]}" "$bin/pg_ctl" -D "$2/data" -l "$2/postgres.log" -w -t 60 start ;;
        stop) "${as[@]}" "$bin/pg_ctl" -D "$2/data" -m fast -w -t 60 stop ;;
        *) echo "pg_server start|stop DIR" >&2; return 2 ;;
    esac
}

# Start a throwaway PostgreSQL on a free loopback port, its cluster in a temporary directory, and
# create a database for the tests; exports PG_URL. PostgreSQL refuses to run as root, so as root
# the server runs as the `postgres` user the Debian package creates.
start_postgres() {
    PG_BIN=$(pg_bindir) || { install_packages postgresql && PG_BIN=$(pg_bindir); } || {
        echo "PostgreSQL server binaries (initdb, pg_ctl) not found" >&2
        return 1
    }
    PG_AS=()
    PG_DIR=$(mktemp -d)
    if [ "$(id -u)" = 0 ]; then
        id -u postgres >/dev/null 2>&1 || { echo "as root, PostgreSQL needs the postgres user" >&2; return 1; }
        chown postgres "$PG_DIR"
        PG_AS=(runuser -u postgres --)
    fi
    PG_PORT=$(free_port)
    "${PG_AS[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -U freeway --auth=trust -E UTF8 --no-locale \
        >"$PG_DIR/initdb.log" 2>&1 || { echo "initdb failed: see $PG_DIR/initdb.log" >&2; return 1; }
    # In its configuration, not on pg_ctl's command line, so that `pg_server start` restarts it.
    printf "listen_addresses = '127.0.0.1'\nport = %s\nunix_socket_directories = '%s'\n" \
        "$PG_PORT" "$PG_DIR" >>"$PG_DIR/data/postgresql.conf"
    pg_server start "$PG_DIR" >/dev/null ||
        { echo "postgres did not start: see $PG_DIR/postgres.log" >&2; return 1; }
    "${PG_AS[@]}" "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U freeway freeway_test ||
        { echo "cannot create the test database" >&2; return 1; }
    export PG_URL="postgres://freeway@127.0.0.1:$PG_PORT/freeway_test"
}

stop_services() {
    [ -n "${REDIS_PORT:-}" ] && redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1
    for port in ${REDIS_CLUSTER_PORTS:-}; do
        redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true  # the killed one is gone
    done
    if [ -n "${PG_DIR:-}" ]; then
        "${PG_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1
        rm -rf "$PG_DIR"
    fi
    [ -n "${SERVICES_DIR:-}" ] && rm -rf "$SERVICES_DIR"
    return 0
}

# The OTLP receiver of the traces test (tests/otlp/receiver.py): a virtualenv under target/ with
# opentelemetry-proto from PyPI, made once; exports OTLP_PYTHON.
ensure_otlp_receiver() {
    local venv=target/otlp-venv
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import opentelemetry.proto' 2>/dev/null; then
        echo "installing the OTLP receiver's opentelemetry-proto ..." >&2
        python3 -m venv "$venv" && "$venv/bin/pip" install -q opentelemetry-proto==1.45.2 >&2 || return 1
    fi
    export OTLP_PYTHON=$PWD/$venv/bin/python
}

# The browser tests (producer/tests/browser/): Debian's chromium, node
# with npm, playwright-core and axe-core from tests/browser's lockfile, and the TypeScript web
# app's packages from its lockfile. Only what is missing is
# installed.
ensure_browser() {
    ensure_packages chromium:chromium node:nodejs npm:npm || return 1
    [ -x /usr/bin/chromium ] || { echo "chromium is not at /usr/bin/chromium" >&2; return 1; }
    if [ ! -d tests/browser/node_modules/playwright-core ] || [ ! -d tests/browser/node_modules/axe-core ] ||
        [ tests/browser/package-lock.json -nt tests/browser/node_modules/.package-lock.json ]; then
        echo "installing the browser test's node packages ..." >&2
        (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error) >&2 || return 1
    fi
    # The TypeScript web app the same test drives (its build runs in the test, on this build).
    if [ ! -d examples/webapp-ts/node_modules/openapi-fetch ] ||
        [ examples/webapp-ts/package-lock.json -nt examples/webapp-ts/node_modules/.package-lock.json ]; then
        echo "installing the TypeScript web app's node packages ..." >&2
        (cd examples/webapp-ts && npm ci --no-audit --no-fund --loglevel=error) >&2 || return 1
    fi
}
