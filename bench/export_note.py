"""How long `rngdctl export` takes for a 200-step and a 100,000-step run.

Builds a store in a temp folder with recorded steps (phases, a baseline pass,
samples every 5 s, a gate check), then times write_note. Prints the median of
5 exports of each and checks the targets: a 200-step note in under 0.5 s, a
100,000-step note in under 15 s (on 2 shared cores; a run that long
takes days, and the note is written once).

    .venv/bin/python bench/export_note.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from daemon.store import DONE, Store
from rngdctl.export import write_note
from trainer import records

TARGETS = {200: 0.5, 100_000: 15.0}
PHASES = {"fwd_bwd": 1.2, "upload": 0.9, "download": 0.8, "host_optim": 1.1,
          "device_optim": 0.3, "wait": 0.01}


def build(store: Store, steps: int) -> int:
    shape = {"layers": 32, "cards": 2, "seq_len": 512, "accum": 4}
    run = store.add_run({"cards": 2, "resident": 8, "steps": steps, "model": "llama3-8b-mini",
                         "seq_len": 512, "accum": 4, "baseline": True}, name=f"bench-{steps}")
    store.add_gate_check(run, [{"name": "host_load", "reading": 12.0, "threshold": "< 150",
                                "verdict": "pass", "detail": ""}], True, now=1.0)
    store.claim_for_launch(run, launcher="local", now=2.0)
    store.add_pass(run, records.Start(records.BASELINE, {"resident": 0}, time=3.0))
    store.add_pass(run, records.Start(records.MAIN, {"resident": 8}, time=4.0))
    store.add_steps(run, [records.Step(records.BASELINE, n, 2.0, 4.4, 4096, 1e-5, PHASES,
                                       time=4.0 + n, extra={**shape, "resident_per_card": 0})
                          for n in range(1, 21)])
    store.add_steps(run, [records.Step(records.MAIN, n, 2.0 - n / steps, 4.0 + (n % 7) / 100,
                                       4096, 1e-5, PHASES, time=100.0 + 4 * n,
                                       extra={**shape, "resident_per_card": 8})
                          for n in range(1, steps + 1)])
    for i in range(steps * 4 // 5):
        store.add_sample(load=(10.0 + i % 40, 9.0, 8.0), holders=[], run_id=run,
                         now=100.0 + 5 * i)
    store.finish_run(run, DONE, now=100.0 + 4 * steps)
    return run


def main() -> int:
    ok = True
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "rngdctl.db") as store:
        for steps, target in TARGETS.items():
            run = build(store, steps)
            times = []
            for i in range(5):
                started = time.perf_counter()
                write_note(store, [run], Path(tmp) / f"out-{steps}-{i}")
                times.append(time.perf_counter() - started)
            median = statistics.median(times)
            verdict = "ok" if median < target else "MISSED"
            ok &= median < target
            print(f"{steps:>7,} steps: export median {median:.3f} s over 5 "
                  f"(min {min(times):.3f}, max {max(times):.3f}); target < {target:g} s: "
                  f"{verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
