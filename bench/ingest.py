"""Ingest against its floor: ``Ingest.feed`` beside json.loads plus a raw executemany.

Both sides take the same trainer lines (step records as the trainer writes
them: phases, memory, the shape's extra keys) in batches of ``--batch`` lines
(what one daemon tick reads) and end with the same rows in a fresh store's
steps table, indexes and all. The floor does the least any ingest must:
``json.loads`` per line, the stored JSON columns written back as text, one
``executemany`` per batch in one transaction. Alternating rounds, the median
of each. Target: feed >= 0.7x the floor's lines per second.

    nice -n 5 .venv/bin/python bench/ingest.py --lines 20000 --rounds 5
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    lines = trainer_lines(args.lines)
    fed, floors = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            floors.append(floor(Path(tmp) / f"floor-{r}.db", lines, args.batch))
            fed.append(feed(Path(tmp) / f"feed-{r}.db", lines, args.batch))
            with Store(Path(tmp) / f"feed-{r}.db") as a, Store(Path(tmp) / f"floor-{r}.db") as b:
                assert a.steps(1) == b.steps(1), "the floor must store the same rows"
    n = args.lines
    feed_rate, floor_rate = n / statistics.median(fed), n / statistics.median(floors)
    ratio = feed_rate / floor_rate
    print(f"Ingest.feed: {feed_rate:,.0f} lines/s; floor (json.loads + executemany): "
          f"{floor_rate:,.0f} lines/s; {ratio:.2f}x (target >= {TARGET}x): "
          f"{'met' if ratio >= TARGET else 'MISSED'}")
    print(f"({n:,} step lines in batches of {args.batch}, median of {args.rounds} alternating "
          f"rounds each)")
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
