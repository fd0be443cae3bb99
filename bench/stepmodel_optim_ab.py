"""The step model with and without the optimizer calibration, on the same stored runs.

Reads the homes ``bench/stepmodel_user.py --keep DIR`` kept (one run each)
and gives each run's error twice, as ``rngdctl show`` computes it
(``stepmodel.for_run``): with its baseline's optimizer calibration, and
without it (``calibrated=False``: the model as it priced before, the whole
host optimizer per offloaded layer and a resident layer's device optimizer
estimated as that). The same runs, so the difference is the model's alone.
Prints per config the errors and the host and device optimizers' shares of
them (model less measured, over the measured step), then the mean share of
every phase over all runs: the terms' bias.

    OMP_NUM_THREADS=1 .venv/bin/python bench/stepmodel_user.py --samples 2 \\
        --models tiny-llama --keep runs/
    .venv/bin/python bench/stepmodel_optim_ab.py runs/
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon import stepmodel
from daemon.home import Home
from daemon.stepmodel import SPLIT

PHASES = ("step", *SPLIT)


def shares(c: stepmodel.Comparison) -> dict[str, float]:
    out = {r["phase"]: r["share"] for r in c.split() if r["share"] is not None}
    return {"step": c.error, **out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kept", help="the folder given to stepmodel_user.py --keep")
    args = ap.parse_args()
    kept = Path(args.kept)
    homes = sorted(p for p in kept.iterdir() if Home(p).db_path.exists()) if kept.is_dir() else []
    if not homes:
        print(f"no kept homes in {args.kept}", file=sys.stderr)
        return 2
    rows: dict[str, list[tuple[dict, dict]]] = {}
    for home in homes:
        store = Home(home).store()
        for run in store.runs():
            old = stepmodel.for_run(store, run["id"], calibrated=False)
            new = stepmodel.for_run(store, run["id"])
            if old is None or new is None:
                continue
            config = home.name.split("-i")[0]
            rows.setdefault(config, []).append((shares(old), shares(new)))
    print("| config | runs | errors without -> with the calibration | host_optim share | "
          "device_optim share |")
    print("| --- | --- | --- | --- | --- |")
    for config, pairs in rows.items():
        def mean(i: int, phase: str, pairs=pairs) -> str:
            return f"{statistics.mean(p[i][phase] for p in pairs) * 100:+.2f} %"

        errors = ", ".join(f"{o['step'] * 100:+.2f} -> {n['step'] * 100:+.2f} %" for o, n in pairs)
        print(f"| {config} | {len(pairs)} | {errors} | {mean(0, 'host_optim')} -> "
              f"{mean(1, 'host_optim')} | {mean(0, 'device_optim')} -> {mean(1, 'device_optim')} |")
    every = [p for pairs in rows.values() for p in pairs]
    print(f"\nmean share over {len(every)} runs (sd), without -> with the calibration:")
    for phase in PHASES:
        old, new = ([p[i].get(phase, 0.0) for p in every] for i in (0, 1))
        print(f"  {phase:<13} {statistics.mean(old) * 100:+.2f} % ({statistics.pstdev(old) * 100:.2f})"
              f" -> {statistics.mean(new) * 100:+.2f} % ({statistics.pstdev(new) * 100:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
