#!/usr/bin/env python3
"""freeway and its peer, side by side: the load benchmark's throughput scenario and BullMQ doing
the same durable work (benches/bullmq/), run in turns on the same Redis and machine, several
times, with the medians and the ratios printed at the end.

The two take turns (freeway first in odd rounds, BullMQ first in even ones), so that a machine
whose speed drifts during the comparison drifts for both. Needs the release builds and the
peer's packages:

    cargo build --release -p worker -p producer -p sim --bins --examples
    npm ci --prefix benches/bullmq
    REDIS_URL=redis://127.0.0.1:6379 python3 benches/peer.py --reps 5 --concurrency 64

With `--postgres URL` both use PostgreSQL (a server the user may create databases on) instead
of a SQLite file their worker processes share.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

# What each side prints, and the figure each line gives.
FREEWAY = {
    "runs/s": r"^  drain .*= ([\d,]+) runs/s",
    "cpu ms a run": r"^  pipeline +([\d.]+) ms of CPU a run",
    "workers' cpu": r"^  pipeline .*\(workers ([\d.]+)",
    "commands a run": r"^  redis +([\d.]+) commands",
    "slots busy %": r"^  slots +(\d+) % busy",
}
BULLMQ = {
    "runs/s": r"^  drained .*= ([\d,]+) runs/s",
    "cpu ms a run": r"^  pipeline +([\d.]+) ms of CPU a run",
    "workers' cpu": r"^  pipeline .*\(workers ([\d.]+)",
    "commands a run": r"^  redis +([\d.]+) commands",
}


def figures(text, patterns):
    found = {}
    for name, pattern in patterns.items():
        match = re.search(pattern, text, re.MULTILINE)
        if not match:
            continue
        found[name] = float(match.group(1).replace(",", ""))
    return found


def run(name, command, patterns):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        sys.exit(f"peer.py: {name} failed ({done.returncode}): {' '.join(command)}")
    found = figures(done.stdout, patterns)
    missing = [k for k in patterns if k not in found]
    if missing:
        sys.stderr.write(done.stdout)
        sys.exit(f"peer.py: {name} printed no {', '.join(missing)}")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="rounds of both (default 5)")
    parser.add_argument("--runs", type=int, default=10_000, help="runs a round (default 10000)")
    parser.add_argument("--replicas", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--concurrency", type=int, default=64, help="runs at once a process")
    parser.add_argument("--postgres", metavar="URL", help="use PostgreSQL instead of SQLite")
    parser.add_argument("--target", default="target/release", help="where the builds are")
    args = parser.parse_args()
    if args.reps < 1 or args.runs < 1 or args.replicas < 1 or args.concurrency < 1:
        parser.error("--reps, --runs, --replicas and --concurrency must be positive")
    if not os.environ.get("REDIS_URL"):
        parser.error("REDIS_URL is not set")
    here = os.path.dirname(os.path.abspath(__file__))
    shape = ["--runs", str(args.runs), "--replicas", str(args.replicas),
             "--concurrency", str(args.concurrency)]
    freeway = [os.path.join(args.target, "examples", "load"), "--scenario", "throughput", *shape]
    bullmq = ["node", os.path.join(here, "bullmq", "bench.mjs"), *shape,
              "--sim", os.path.join(args.target, "sim")]
    if args.postgres:
        freeway += ["--postgres", args.postgres]
        bullmq += ["--store", "postgres"]
        os.environ["PG_URL"] = args.postgres
    store = "PostgreSQL" if args.postgres else "SQLite"
    print(f"freeway and BullMQ: {args.runs} runs, {args.replicas} processes × "
          f"{args.concurrency}, {store}, {args.reps} rounds in turns")
    results = {"freeway": [], "BullMQ": []}
    for rep in range(1, args.reps + 1):
        sides = [("freeway", freeway, FREEWAY), ("BullMQ", bullmq, BULLMQ)]
        if rep % 2 == 0:
            sides.reverse()
        for name, command, patterns in sides:
            found = run(name, command, patterns)
            results[name].append(found)
            shown = ", ".join(f"{k} {v:,.3g}" if v < 10 else f"{k} {v:,.0f}"
                              for k, v in found.items())
            print(f"  round {rep}  {name:8} {shown}", flush=True)
    print("medians:")
    medians = {
        side: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        for side, runs in results.items()
    }
    print(f"  {'':16}{'freeway':>10}{'BullMQ':>10}{'ratio':>8}")
    for key in FREEWAY:
        ours = medians["freeway"].get(key)
        theirs = medians["BullMQ"].get(key)
        ratio = f"{ours / theirs:.2f}" if ours is not None and theirs else "—"
        show = lambda v: "—" if v is None else (f"{v:,.0f}" if v >= 10 else f"{v:.3f}")
        print(f"  {key:16}{show(ours):>10}{show(theirs):>10}{ratio:>8}")


if __name__ == "__main__":
    main()
