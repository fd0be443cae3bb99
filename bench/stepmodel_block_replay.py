"""Recorded host noise replayed under other interleave blocks: which block size it hurts least.

Reads runs kept by ``bench/stepmodel_user.py --keep DIR`` whose asked config
is all-offload (1 x 0, 2 x 0): both passes do the same work, so every
difference between them is the host's. Each run's steps, in the order they
ran (``train.interleaved_order`` with the run's own block), are one recorded
series of the host's noise. Replayed, the series is dealt out to two passes
again in blocks of ``--blocks`` (from every ``--shift``-th position, the
series wrapped round), the config's steps times ``--ratio`` (a config that
much faster than the baseline), and ``stepmodel.paired`` gives the
ratio ``show`` would: its error against the true one is the host's doing
alone. The step after a switch between the passes stays where it was
recorded, so blocks other than the recorded one see it out of place.

    .venv/bin/python bench/stepmodel_block_replay.py runs/           # kept homes
    .venv/bin/python bench/stepmodel_block_replay.py runs/ --blocks 1,2,5 --ratio 0.8
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon import stepmodel
from daemon.store import Store
from trainer.engine.timing import interleaved_order
from trainer.records import BASELINE, MAIN


def recorded_series(home: Path) -> list[float] | None:
    """The run's step times in the order they ran; None unless it interleaved all-offload."""
    store = Store(home / "rngdctl.db")
    configs = {p["config_label"]: p["config"] for p in store.passes(1)}
    main = configs.get(MAIN) or {}
    if not main.get("interleave") or main.get("resident_layers"):
        return None
    steps = [store.steps(1, BASELINE), store.steps(1, MAIN)]
    queues = [iter(s) for s in steps]
    order = interleaved_order([len(s) for s in steps], int(main["interleave"]))
    return [next(queues[which])["step_s"] for which in order]


def replayed_error(series: list[float], block: int, shift: int, ratio: float) -> float:
    """The error ``show`` would give the series dealt out again in blocks of ``block``."""
    series = series[shift:] + series[:shift]
    passes: list[list[dict]] = [[], []]
    for step_s, which in zip(series, interleaved_order([len(series) // 2] * 2, block)):
        passes[which].append({"step": len(passes[which]) + 1, "phases": {},
                              "step_s": step_s * (ratio if which else 1.0)})
    base = statistics.median(s["step_s"] for s in passes[0] if s["step"] > 5)
    return stepmodel.paired(passes[0], passes[1], block)[0]["step_s"] / base / ratio - 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kept", nargs="+", type=Path, help="folders of kept homes")
    ap.add_argument("--blocks", default="1,2,3,5,10")
    ap.add_argument("--shift", type=int, default=8, help="replay from every Nth position")
    ap.add_argument("--ratio", type=float, default=1.0, help="the config's step over the baseline's")
    args = ap.parse_args()
    homes = sorted(h for folder in args.kept for h in folder.iterdir()
                   if (h / "rngdctl.db").is_file())
    series = [s for s in map(recorded_series, homes) if s]
    if not series:
        sys.exit("no kept all-offload interleaved runs under " + ", ".join(map(str, args.kept)))
    print(f"{len(series)} recorded series of {len(homes)} kept runs; config {args.ratio:g} x "
          f"the baseline's step")
    print("| block | replays | median abs error | 95th percentile | worst | sd | past 3 % |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for block in map(int, args.blocks.split(",")):
        errors = [replayed_error(s, block, shift, args.ratio) for s in series
                  for shift in range(0, len(s), args.shift)]
        size = sorted(map(abs, errors))
        print(f"| {block} | {len(errors)} | {statistics.median(size):.2%} | "
              f"{size[int(0.95 * (len(size) - 1))]:.2%} | {size[-1]:.2%} | "
              f"{statistics.pstdev(errors):.2%} | {sum(e > 0.03 for e in size)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
