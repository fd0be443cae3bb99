"""Ingest against its floor: ``Ingest.feed`` beside json.loads plus a raw executemany.

Both sides take the same trainer lines (step records as the trainer writes
them: phases, memory, the shape's extra keys) in batches of ``--batch`` lines
(what one daemon tick reads) and end with the same rows in a fresh store's
steps table, indexes and all. The floor does the least any ingest must:
``json.loads`` per line, the stored JSON columns written back as text, one
``executemany`` per batch in one transaction. Alternating rounds, the median
of each. Target: feed >= 0.7x the floor's lines per second.

    nice -n 5 .venv/bin/python bench/ingest.py --lines 20000 --rounds 5

``--trackers`` (issue 35) measures instead ``Ingest.feed`` with both trackers on against
it without them: the daemon's tracker worker (daemon/trackers/worker.py) sending the run
to TensorBoard (a temporary folder) and to the MLflow server at ``--mlflow`` while the
batches go in, poked after each batch as a tick pokes it. Target: >= 0.9x the lines per
second without them. It then waits for both to catch up, says how long that took, and
checks that each tracker's cursor stands at the last step (each step sent once: the
tracker tests check the points themselves). An MLflow server for it:

    .venv/bin/mlflow server --host 127.0.0.1 --port 5055 --workers 1 \
        --backend-store-uri sqlite:////tmp/bench-mlflow.db \
        --artifacts-destination /tmp/bench-mlflow-artifacts &
    nice -n 5 .venv/bin/python bench/ingest.py --trackers --mlflow http://127.0.0.1:5055
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from daemon.run.ingest import Ingest
from daemon.store import Store
from trainer import records

TARGET = 0.7
TRACKERS_TARGET = 0.9
#: Seconds the trackers get to catch up after the last batch.
CATCH_UP_S = 600.0


def trainer_lines(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    shape = {"layers": 8, "cards": 2, "resident_per_card": 1, "resident_layers": 2,
             "offloaded_layers": 6, "seq_len": 512, "accum": 4, "micro_batch": 1}
    lines = [records.dumps(records.Start(records.MAIN, shape, time=0.0))]
    for i in range(1, n + 1):
        phases = {p: rng.random() / 100 for p in records.PHASES}
        lines.append(records.dumps(records.Step(
            records.MAIN, i, 3.0 - i * 1e-5, sum(phases.values()) * 1.01, 4096, 1e-5, phases,
            {"rss_gb": 12.5, "device_gb": 3.25}, time=1000.0 + i, extra=shape)))
    return lines


_CORE = {"kind", "v", "config_label", "step", "loss", "step_s", "tokens", "lr", "phases",
         "memory", "time"}


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def floor_row(run: int, obj: dict) -> tuple:
    """The row the store writes for a step object, with no checks at all."""
    phases = obj["phases"]
    return (run, obj.get("config_label", records.MAIN), obj["step"], obj["loss"], None,
            obj["step_s"], obj["tokens"], obj["lr"], _dumps(phases), _dumps(obj["memory"]),
            _dumps({k: v for k, v in obj.items() if k not in _CORE}), obj["time"],
            *(phases[p] for p in records.PHASES))


def feed(path: Path, lines: list[str], batch: int) -> float:
    with Store(path) as store:
        run = store.add_run({"cards": 2})
        ingest = Ingest(store)
        started = time.perf_counter()
        for i in range(0, len(lines), batch):
            ingest.feed(run, lines[i:i + batch])
        return time.perf_counter() - started


def floor(path: Path, lines: list[str], batch: int) -> float:
    with Store(path) as store:
        run = store.add_run({"cards": 2})
        started = time.perf_counter()
        for i in range(0, len(lines), batch):
            rows = []
            for line in lines[i:i + batch]:
                obj = json.loads(line)
                if obj.get("kind") != "step":
                    continue
                rows.append(floor_row(run, obj))
            store.insert_step_rows(rows)
        return time.perf_counter() - started


def report(name: str, seconds: list[float], against: str, their_seconds: list[float],
           lines: int, target: float) -> float:
    """Print the two lines-per-second figures (medians) and their ratio; the ratio."""
    rate, theirs = lines / statistics.median(seconds), lines / statistics.median(their_seconds)
    ratio = rate / theirs
    print(f"{name}: {rate:,.0f} lines/s; {against}: {theirs:,.0f} lines/s; {ratio:.2f}x "
          f"(target >= {target}x): {'met' if ratio >= target else 'MISSED'}")
    return ratio


def feed_tracked(path: Path, lines: list[str], batch: int, tensorboard: Path,
                 mlflow: str) -> tuple[float, float]:
    """``feed`` with both trackers' worker running on the same store: (seconds to ingest,
    seconds more until both trackers stood at the last step)."""
    from daemon.trackers.targets import sinks
    from daemon.trackers.worker import TrackerWorker

    with Store(path) as store:
        run = store.add_run({"cards": 2}, name="bench")
        store.update_run(run, status="running", started=time.time())
        trackers = sinks(tensorboard=str(tensorboard), mlflow=mlflow,
                         experiment="bench-ingest")
        worker = TrackerWorker(trackers, open_store=lambda: Store(path))
        worker.start()
        try:
            ingest = Ingest(store)
            started = time.perf_counter()
            for i in range(0, len(lines), batch):
                ingest.feed(run, lines[i:i + batch])
                worker.poke()
            ingested = time.perf_counter() - started
            last = store.last_step(run)["step"]
            deadline = time.perf_counter() + CATCH_UP_S
            while any(store.tracker_pass(t.key, run, records.MAIN)["step"] < last
                      for t in trackers):
                if time.perf_counter() > deadline:
                    raise SystemExit(f"the trackers did not catch up within {CATCH_UP_S:g} s")
                worker.poke()
                time.sleep(0.05)
            return ingested, time.perf_counter() - started - ingested
        finally:
            worker.close()


def trackers_main(args, lines: list[str]) -> int:
    if not args.mlflow:
        print("--trackers needs --mlflow URI: an MLflow tracking server (see the docstring)",
              file=sys.stderr)
        return 2
    plain, tracked, catch_up = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            plain.append(feed(Path(tmp) / f"plain-{r}.db", lines, args.batch))
            seconds, caught = feed_tracked(Path(tmp) / f"tracked-{r}.db", lines, args.batch,
                                           Path(tmp) / f"tb-{r}", args.mlflow)
            tracked.append(seconds)
            catch_up.append(caught)
    ratio = report("Ingest.feed with TensorBoard and MLflow on", tracked, "without", plain,
                   args.lines, TRACKERS_TARGET)
    print(f"both caught up {statistics.median(catch_up):.1f} s after the last batch (median); "
          f"each cursor at the last step")
    print(f"({args.lines:,} step lines in batches of {args.batch}, median of {args.rounds} "
          f"alternating rounds each; MLflow at {args.mlflow})")
    return 0 if ratio >= TRACKERS_TARGET else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trackers", action="store_true",
                        help="ingest with both trackers on against without them")
    parser.add_argument("--mlflow", metavar="URI", help="the MLflow server for --trackers")
    args = parser.parse_args()
    lines = trainer_lines(args.lines)
    if args.trackers:
        return trackers_main(args, lines)
    fed, floors = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            floors.append(floor(Path(tmp) / f"floor-{r}.db", lines, args.batch))
            fed.append(feed(Path(tmp) / f"feed-{r}.db", lines, args.batch))
            with Store(Path(tmp) / f"feed-{r}.db") as a, Store(Path(tmp) / f"floor-{r}.db") as b:
                assert a.steps(1) == b.steps(1), "the floor must store the same rows"
    n = args.lines
    ratio = report("Ingest.feed", fed, "floor (json.loads + executemany)", floors, n, TARGET)
    print(f"({n:,} step lines in batches of {args.batch}, median of {args.rounds} alternating "
          f"rounds each)")
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
