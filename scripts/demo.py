"""The demo's scenario, run by scripts/demo.sh against the services it started.

Enqueues a batch of runs from several users over mixed routes (free, free-then-paid, a chain of
free tiers of different shapes — OpenRouter's shared minute, then Groq's per-model pool, then a
paid provider —, a user's own connection, one that needs an approval), shows progress while the
free pools rest, refuses an all-free run at enqueue during the rest, approves the pending tool
call, then prints a summary that says which pool served which runs.
Standard library only, so a fresh machine needs nothing but python3.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

API = os.environ["DEMO_API"]
MODE = os.environ.get("DEMO_MODE", "sim")
SHORT = os.environ.get("DEMO_SHORT") == "1"
SIM = os.environ.get("DEMO_SIM_URL")

FREE_A = "meta-llama/llama-3.3-70b-instruct:free"
FREE_B = "qwen/qwen3-coder:free"
PAID = "openai/gpt-4o-mini"
# The chain of shapes: a per-minute account pool, a per-model pool, credits.
SHAPES = [{"model": FREE_A}, {"model": "llama-3.3-70b-versatile", "provider": "groq"}, {"model": "gpt-4o-mini", "provider": "paid"}]
TERMINAL = {"succeeded", "failed", "refused"}
TIMEOUT_S = 150


def call(method, path, body=None, base=API):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            raw = res.read()
            return res.status, dict(res.headers), (json.loads(raw) if raw.strip().startswith(b"{") or raw.strip().startswith(b"[") else raw)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = raw
        return e.code, dict(e.headers), payload


def wait_healthy():
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            status, _, _ = call("GET", "/healthz")
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("demo: the API did not become healthy")


def run_request(user, text, routes, on_rest="queue", tools=None):
    body = {"user_id": user, "input": text, "routes": routes, "on_rest": on_rest}
    if tools:
        body["tools"] = tools
    return body


def batch():
    if MODE == "openrouter":
        return [
            ("free", run_request("alice", "Say hello in five words.", [{"model": "openrouter/free"}])),
            ("free", run_request("bob", "Name one prime number.", [{"model": FREE_A}, {"model": "openrouter/free"}])),
        ]
    users = ["alice", "bob", "carol", "dave"]
    free_n, paid_n = (5, 1) if SHORT else (9, 2)
    runs = []
    for i in range(free_n):
        runs.append(("free", run_request(users[i % 4], f"question {i}: what is {i} + {i}?", [{"model": FREE_A}, {"model": FREE_B}])))
    for i in range(paid_n):
        runs.append(("free→paid", run_request(users[i % 4], f"urgent {i}", [{"model": FREE_B}, {"model": PAID}])))
    runs.append(("own key", run_request("alice", "with my own key", [{"model": FREE_A, "connection": "conn_alice"}])))
    tool = {"name": "delete_file", "description": "Delete a file", "parameters": {"type": "object"}, "approval": "required"}
    runs.append(("approval", run_request("carol", "clean up [[tools:1]] [[tool:delete_file]]", [{"model": PAID}], tools=[tool])))
    return runs


def shape_runs():
    """Runs over the chain of shapes, enqueued once OpenRouter's pool rests: Groq's pool takes
    the overflow until it is spent too, then the paid provider."""
    users = ["alice", "bob", "carol", "dave"]
    return [run_request(users[i % 4], f"by shape {i}", SHAPES) for i in range(4 if SHORT else 8)]


def served_by(view):
    """The pool (or off-quota provider) whose call answered the run, from its attempt log."""
    ok = [a for a in view.get("attempts", []) if a.get("verdict") is None and a.get("http_status") == 200]
    if not ok:
        return "-"
    route = ok[-1]["route"]
    if route.startswith("conn:"):
        return "own key"
    provider, model = route.removeprefix("platform:").split("/", 1)
    if provider == "openrouter" and (model.endswith(":free") or model == "openrouter/free"):
        return "openrouter-free"
    if provider == "groq":
        return "groq-llama-70b"
    return f"{provider} (off-quota)"


def rests():
    status, _, body = call("GET", "/v1/rests")
    return body.get("rests", []) if status == 200 and isinstance(body, dict) else []


def events_of(run_id):
    req = urllib.request.Request(f"{API}/v1/runs/{run_id}/events")
    kinds = []
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            for line in res.read().decode().splitlines():
                if line.startswith("event:"):
                    kinds.append(line.split(":", 1)[1].strip())
    except (urllib.error.URLError, OSError):
        pass
    return kinds


def main():
    wait_healthy()
    print(f"freeway demo against {'the simulator' if MODE == 'sim' else 'OpenRouter'}: API {API}")
    if MODE == "sim":
        status, _, body = call("PUT", "/v1/connections/conn_alice", {"user_id": "alice", "provider": "openrouter", "api_key": "sk-or-v1-alice-own-key"})
        assert status == 204, f"connection: {status} {body}"

    tracked = {}  # run id -> label
    for label, body in batch():
        status, _, payload = call("POST", "/v1/runs", body)
        if status != 202:
            sys.exit(f"demo: enqueue failed: {status} {payload}")
        tracked[payload["run_id"]] = label
    print(f"enqueued {len(tracked)} runs from 4 users")

    seen_rests, refused_at_enqueue, approved, delayed_seen = {}, [], set(), set()
    shapes_sent = False
    start = time.time()
    last_line = ""
    while True:
        views = {rid: call("GET", f"/v1/runs/{rid}")[2] for rid in tracked}
        for r in rests():
            seen_rests[f"{r['scope']}:{r['key']}"] = r.get("reason", "")
        pool_rest = next((r for r in rests() if r["scope"] == "pool"), None)
        if pool_rest and not shapes_sent and MODE == "sim":
            shapes_sent = True
            for body in shape_runs():
                status, _, payload = call("POST", "/v1/runs", body)
                if status != 202:
                    sys.exit(f"demo: enqueue failed: {status} {payload}")
                tracked[payload["run_id"]] = "shapes"
            print(f"  OpenRouter's free pool rests: {len(shape_runs())} runs over OpenRouter free → Groq free → paid")
        if pool_rest and not refused_at_enqueue and MODE == "sim":
            status, headers, payload = call("POST", "/v1/runs", run_request("dave", "can I go now?", [{"model": FREE_A}, {"model": FREE_B}], on_rest="refuse"))
            retry = headers.get("Retry-After") or headers.get("retry-after")
            refused_at_enqueue.append((status, payload.get("error", {}).get("code") if isinstance(payload, dict) else payload, retry))
            print(f"  while the pool rests, an all-free run with on_rest=refuse gets HTTP {status} {refused_at_enqueue[-1][1]}, Retry-After: {retry}")
        for rid, v in views.items():
            if not isinstance(v, dict):
                continue
            if v["status"] == "delayed":
                delayed_seen.add(rid)
            pending = v.get("pending_approval")
            if v["status"] == "awaiting_approval" and pending and rid not in approved:
                status, _, payload = call("POST", f"/v1/runs/{rid}/approvals", {"tool_call_id": pending["id"], "decision": "approve", "result": "deleted 3 files"})
                approved.add(rid)
                if status == 202:
                    tracked[payload["run_id"]] = "continuation"
                    print(f"  approved {pending['name']} for {rid}: continuation {payload['run_id']}")
        counts = {}
        for v in views.values():
            if isinstance(v, dict):
                counts[v["status"]] = counts.get(v["status"], 0) + 1
        rest_text = ", ".join(f"{r['scope']} {r['key']} {r['remaining_ms'] / 1000:.1f}s" for r in rests()) or "none"
        line = " · ".join(f"{k} {n}" for k, n in sorted(counts.items())) + f" | rests: {rest_text}"
        if line != last_line:
            print(f"  t={time.time() - start:5.1f}s  {line}")
            last_line = line
        done = all(isinstance(v, dict) and v["status"] in TERMINAL | {"awaiting_approval"} and (v["status"] != "awaiting_approval" or rid in approved) for rid, v in views.items())
        if done and len(views) == len(tracked):
            break
        if time.time() - start > TIMEOUT_S:
            sys.exit("demo: runs did not finish in time")
        time.sleep(0.5)

    print()
    print(f"{'run':32} {'kind':12} {'user':6} {'status':18} {'code':18} calls  delayed  served by")
    rows, calls, served = [], [], {}
    for rid, label in tracked.items():
        v = call("GET", f"/v1/runs/{rid}")[2]
        kinds = events_of(rid)
        delayed = "delayed" in kinds or rid in delayed_seen
        rows.append((v, delayed))
        calls.append(v["calls"])
        by = served_by(v)
        served.setdefault(by, []).append(label)
        print(f"{rid:32} {label:12} {v['user_id']:6} {v['status']:18} {str(v.get('code') or ''):18} {v['calls']:5}  {'yes' if delayed else '   '}      {by}")
    succeeded = sum(1 for v, _ in rows if v["status"] == "succeeded")
    delayed_done = sum(1 for v, d in rows if d and v["status"] == "succeeded")
    failed = [v for v, _ in rows if v["status"] in ("failed", "refused")]
    print()
    print("summary")
    print(f"  runs: {len(rows)}; succeeded {succeeded}; approved then continued {len(approved)}; delayed then completed {delayed_done}; failed or refused by a worker {len(failed)}")
    print(f"  refused at enqueue while the pool rested: {len(refused_at_enqueue)}")
    print(f"  calls per run: mean {sum(calls) / max(len(calls), 1):.2f}, max {max(calls or [0])}")
    print(f"  rests seen: {', '.join(sorted(seen_rests)) or 'none'}")
    print("  served by: " + "; ".join(f"{pool} {len(labels)} ({', '.join(sorted(set(labels)))})" for pool, labels in sorted(served.items())))
    pools = call("GET", "/v1/pools")[2]
    if isinstance(pools, dict):
        shapes = [f"{p['name']} ({p['provider']}, {p.get('rpm') or '?'} per {p['window_s']} s {p['window']}, {p['connection']})" for p in pools.get("pools", [])]
        print(f"  pools: {'; '.join(shapes)}")
    if SIM:
        log = call("GET", "/_sim/calls", base=SIM)[2]
        print(f"  provider calls: {len(log)}, of which 429: {sum(1 for c in log if c['status'] == 429)}")
    print(f"  the board: {API}/board")

    if failed:
        sys.exit(f"demo: {len(failed)} runs failed: {[(v['run_id'], v.get('code')) for v in failed]}")
    if MODE == "sim" and (not seen_rests or delayed_done == 0 or not refused_at_enqueue or refused_at_enqueue[0][0] != 429):
        sys.exit("demo: the scenario did not show a rest, a delayed run and a refusal")
    if MODE == "sim" and not ({"groq-llama-70b", "paid (off-quota)"} <= set(served)):
        sys.exit(f"demo: the chain of shapes did not fail over to Groq and to the paid provider: {served}")


if __name__ == "__main__":
    main()
