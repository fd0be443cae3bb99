"""The error of the queue's estimated start and end (issue 14), measured through the daemon.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python bench/estimate_error.py [--runs 5]
        [--batches 2]

In a fresh home, as a user would:

1. the demo's run (``rngdctl demo``'s config: tiny-llama, 1 card x 2 resident,
   60 steps interleaved with a 40-step baseline) through ``rngdctl daemon
   --exit-when-idle``. It gets no estimate: the home has no baseline yet for
   its model, and an estimate is never invented;
2. then ``--runs`` demo-sized runs (cards x resident x steps varied, each with
   its baseline, as the demo's) queued together, and the daemon again. Each
   queued run's first estimate is made at the daemon's first tick (the run
   ahead's steps left at its measured median, and the step model's duration
   from the demo's baseline for each run ahead), and its error is stored when
   it ends (``Store.finish_run``): estimated - actual, in seconds;
3. with ``--batches 2`` (or more), the same runs queued again and the daemon
   again: the start-up each estimate adds is then the median of the last 5
   done runs, where the first batch had only the demo's (the home's first,
   cold start).

Prints one row per run (position, estimated and actual start and end, the
errors, the error as a share of how far ahead the estimate looked) and the
median and worst |error|; ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from daemon.home import Home

RNGDCTL = [sys.executable, "-m", "rngdctl"]
DEMO = ["--model", "tiny-llama", "--seq-len", "64", "--accum", "2", "--lr", "1e-3",
        "--baseline", "--interleave", "5"]
#: (cards, resident per card, steps, baseline steps) of the queued runs, in queue order.
CONFIGS = [(1, 2, 60, 40), (1, 0, 80, 20), (2, 1, 60, 20), (1, 1, 120, 20),
           (2, 2, 80, 20), (1, 2, 100, 20)]


def rngdctl(home: Path, *args: str) -> str:
    proc = subprocess.run([*RNGDCTL, "--home", str(home), *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO, check=False)
    if proc.returncode != 0:
        sys.exit(f"rngdctl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip()


def submit(home: Path, name: str, cards: int, resident: int, steps: int,
           baseline_steps: int) -> int:
    return int(rngdctl(home, "submit", "--cards", str(cards), "--resident", str(resident),
                       "--steps", str(steps), "--baseline-steps", str(baseline_steps),
                       "--name", name, *DEMO))


def run_daemon(home: Path, timeout: float) -> None:
    """The daemon with the local launcher until the queue is empty."""
    with open(home / "daemon.log", "ab") as log:
        proc = subprocess.Popen([*RNGDCTL, "--home", str(home), "daemon", "--launcher", "local",
                                 "--tick", "0.5", "--exit-when-idle"], cwd=REPO, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=60)
            sys.exit(f"the daemon ran past {timeout} s; see {home / 'daemon.log'}")
    if proc.returncode != 0:
        sys.exit(f"the daemon exited {proc.returncode}; see {home / 'daemon.log'}")


def rows_of(home: Path) -> list[dict]:
    with Home(home).store() as store:
        runs = {r["id"]: r for r in store.runs()}
        estimates = {e["run_id"]: e for e in store.estimates()}
    rows = []
    for run_id in sorted(runs):
        run, e = runs[run_id], estimates.get(run_id)
        c = run["config"]
        row = {"run": run_id, "name": run["name"], "config": f"{c['cards']}x{c['resident']}, {c['steps']}+"
                                        f"{c.get('baseline_steps')} steps",
               "status": run["status"], "started": run["started"], "ended": run["ended"]}
        if e is None:
            rows.append({**row, "estimate": None})
            continue
        ahead = run["ended"] - e["made"]  # how far ahead the end estimate looked
        rows.append({**row, "estimate": True, "position": e["position"], "made": e["made"],
                     "start": e["start"], "end": e["end"], "start_error": e["start_error"],
                     "end_error": e["end_error"], "horizon_s": ahead,
                     "end_error_share": e["end_error"] / ahead if ahead > 0 else None,
                     "basis": e["basis"]})
    return rows


def table(rows: list[dict]) -> list[str]:
    out = [("| run | config | position | start est. - actual | end est. - actual "
            "| actual duration | end looked ahead | end error / ahead |"),
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    for r in rows:
        if not r["estimate"]:
            out.append(f"| {r['run']} {r['name']} | {r['config']} | – | no estimate (no baseline for its "
                       f"model in the home yet) | | {r['ended'] - r['started']:.1f} s | | |")
            continue
        out.append(f"| {r['run']} {r['name']} | {r['config']} | {r['position']} | {r['start_error']:+.1f} s "
                   f"| {r['end_error']:+.1f} s | {r['ended'] - r['started']:.1f} s "
                   f"| {r['horizon_s']:.1f} s | {r['end_error_share'] * 100:+.1f} % |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="queued runs a batch (at most 5)")
    ap.add_argument("--batches", type=int, default=2, help="batches queued one after another")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               "unknown CPU")
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rngd-estimates-") as tmp:
        home = Path(tmp)
        t0 = time.monotonic()
        submit(home, "demo", *CONFIGS[0])  # the demo's run: the home's first baseline
        run_daemon(home, args.timeout)
        for batch in range(1, args.batches + 1):
            for i, config in enumerate(CONFIGS[1:args.runs + 1], start=1):
                submit(home, f"b{batch}-{i}", *config)
            run_daemon(home, args.timeout)
        rows = rows_of(home)
        wall = time.monotonic() - t0
    print(f"{cpu}, {os.cpu_count()} cores; load 1 m {load0[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; {wall:.0f} s; OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print("\n".join(table(rows)))
    for batch in range(1, args.batches + 1):
        measured = [r for r in rows if r["estimate"] and r["end_error"] is not None
                    and (r["name"] or "").startswith(f"b{batch}-")]
        if not measured:
            continue
        print(f"batch {batch}:")
        for key in ("start_error", "end_error"):
            errs = [abs(r[key]) for r in measured]
            print(f"  |{key}|: median {statistics.median(errs):.1f} s, worst {max(errs):.1f} s "
                  f"over {len(errs)} runs")
        shares = [abs(r["end_error_share"]) for r in measured]
        print(f"  |end error| / how far ahead it looked: median "
              f"{statistics.median(shares):.1%}, worst {max(shares):.1%}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    bad = [r for r in rows if r["status"] != "done"]
    if bad:
        print(f"{len(bad)} runs did not end done: {[(r['run'], r['status']) for r in bad]}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
