#!/usr/bin/env bash
# The API's OpenAPI document checked as its users meet it: `producer openapi` writes it (the
# same document `GET /openapi.json` serves), openapi-spec-validator (PyPI) validates it as
# OpenAPI 3.1, and openapi-python-client (PyPI) generates the Python client that
# examples/python/enqueue.py imports, which must import and build a run body with it. The tools live in a
# virtualenv under target/, made once. Usage: scripts/check_openapi.sh [PRODUCER_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
producer=${1:-target/debug/producer}
work=target/openapi-check
venv=$work/venv
mkdir -p "$work"
"$producer" openapi > "$work/openapi.json"
if [ ! -x "$venv/bin/openapi-python-client" ]; then
    echo "installing openapi-spec-validator and openapi-python-client ..." >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q openapi-spec-validator==0.9.0 openapi-python-client==0.29.1 httpx==0.28.1
fi
"$venv/bin/openapi-spec-validator" "$work/openapi.json"
rm -rf "$work/freeway_client"
# No formatter hooks: ruff is not needed to use the client.
printf 'post_hooks: []\n' > "$work/client.yaml"
"$venv/bin/openapi-python-client" generate --path "$work/openapi.json" --meta none \
    --config "$work/client.yaml" --output-path "$work/freeway_client" --fail-on-warning >/dev/null
PYTHONPATH="$work:examples/python" "$venv/bin/python" -c '
import enqueue
body = enqueue.run_request("Hello?").to_dict()
assert body["input"] == "Hello?" and body["routes"][0]["model"], body'
echo "openapi: the document validates, and the Python client generated from it imports" >&2
