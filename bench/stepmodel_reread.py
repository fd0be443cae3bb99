"""Kept runs re-read with the step model as it stands: what ``show`` would print for them now.

Reads the homes that ``bench/stepmodel_user.py --keep DIR`` left (one per
sample, named ``MODEL-CxR-iB-...``) and computes each run's comparison again
(``stepmodel.for_run``), so that a change to the model or the pairing is
measured on the same recorded steps as the code before it: check out the
other commit and run the same command. Per row (model, config, block): the
samples, median and worst |error|, how many are past 3 % and 5 %, how many
carry the host-changed notice, how many have a 95 % interval that covers
zero error (``covers 0``), how many past 3 % have neither (silent), and the
mean signed error: a row whose errors lean one way has a term the model gets
wrong there, where noise would average out. Per block, over every row of
every DIR: the rms error and the same counts. With ``--terms``, each row's
mean share of the error by phase (``Comparison.split``): which term a lean is
in.

The interval is ``Comparison.interval`` (1.96 standard errors of the error,
from the run's own step-to-step spread). A commit from before it (issue 28)
has none: there the interval is read as 0.98 x ``step_spread``, that code's
"twice the standard error" of the whole step, so that 1.96 standard errors
by its own rule are compared with 1.96 by the new one.

    .venv/bin/python bench/stepmodel_reread.py runs/           # kept homes
    .venv/bin/python bench/stepmodel_reread.py runs/ --rows    # and each row
    .venv/bin/python bench/stepmodel_reread.py runs/ --terms   # and each row's terms
    .venv/bin/python bench/stepmodel_reread.py runs/ --json f  # and each sample, JSON lines
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon import stepmodel
from daemon.store import Store

KEPT = re.compile(r"^(?P<row>.+-\d+x\d+)-i(?P<block>\d+)-rngd-bench-")


@dataclass(frozen=True)
class Sample:
    error: float
    interval: float  # 95 % interval of the error, half-width (NaN where it has none)
    host_changed: bool  # ``show`` says the host changed between the passes
    shares: dict[str, float]  # each phase's share of the error (``Comparison.split``)

    @property
    def covers_zero(self) -> bool:
        return math.isfinite(self.interval) and abs(self.error) <= self.interval


def interval_of(c) -> float:
    """``c.interval``; before it existed, 1.96 standard errors by that code's ``step_spread``."""
    if hasattr(c, "interval"):
        return c.interval
    return 0.98 * c.step_spread


def reread(home: Path) -> Sample | None:
    """The run's error, its interval, its notice and its terms as ``show`` gives them; None
    without a model."""
    c = stepmodel.for_run(Store(home / "rngdctl.db"), 1)
    if c is None or c.error is None:
        return None
    return Sample(c.error, interval_of(c), bool(c.host_changed),
                  {r["phase"]: r["share"] for r in c.split() if r["share"] is not None})


def counts(samples: list[Sample]) -> str:
    errors = [abs(s.error) for s in samples]
    silent = sum(abs(s.error) > 0.03 and not (s.host_changed or s.covers_zero)
                 for s in samples)
    rms = math.sqrt(statistics.fmean(e * e for e in errors))
    mean = statistics.fmean(s.error for s in samples)
    widths = [s.interval for s in samples if math.isfinite(s.interval)]
    width = statistics.median(widths) * 100 if widths else math.nan
    return (f"n {len(errors):3d}  rms {rms * 100:5.2f} %  mean {mean * 100:+6.2f} %"
            f"  median {statistics.median(errors) * 100:4.1f}  worst {max(errors) * 100:5.1f} %"
            f"  past 3 % {sum(e > 0.03 for e in errors):2d}"
            f"  past 5 % {sum(e > 0.05 for e in errors):2d}"
            f"  host changed {sum(s.host_changed for s in samples):2d}"
            f"  covers 0 {sum(s.covers_zero for s in samples):3d}"
            f"  interval ±{width:4.1f} %  silent {silent}")


def terms(samples: list[Sample]) -> str:
    """Each phase's mean share of the error over ``samples``, largest first."""
    phases = {p for s in samples for p in s.shares}
    means = {p: statistics.fmean(s.shares.get(p, 0.0) for s in samples) for p in phases}
    return ", ".join(f"{p} {m * 100:+.2f} %" for p, m in sorted(means.items(),
                                                                 key=lambda pm: -abs(pm[1])))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path, help="directories of kept homes")
    ap.add_argument("--rows", action="store_true", help="print each row too")
    ap.add_argument("--terms", action="store_true",
                    help="print each row with its mean share of the error by phase")
    ap.add_argument("--json", type=Path, help="write each sample here (JSON lines)")
    args = ap.parse_args()
    rows: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    every: list[dict] = []
    for d in args.dirs:
        for home in sorted(p for p in d.iterdir() if (p / "rngdctl.db").exists()):
            m = KEPT.match(home.name)
            sample = reread(home) if m else None
            if sample is not None:
                rows[m["block"], m["row"]].append(sample)
                every.append({"home": str(home), "error": sample.error,
                              "interval": sample.interval, "host_changed": sample.host_changed})
    if args.json:
        args.json.write_text("".join(json.dumps(e) + "\n" for e in every), encoding="utf-8")
    if not rows:
        print("no kept runs with a step model under " + ", ".join(map(str, args.dirs)),
              file=sys.stderr)
        return 2
    if args.rows or args.terms:
        for (block, row), samples in sorted(rows.items()):
            print(f"{row:26s} blocks {block}  {counts(samples)}")
            if args.terms:
                print(f"{'':26s} terms: {terms(samples)}")
    for block in sorted({b for b, _ in rows}, key=int):
        every = [s for (b, _), samples in rows.items() if b == block for s in samples]
        mode = "one after the other" if block == "0" else f"interleaved, blocks of {block}"
        print(f"{mode + ':':31s} {counts(every)}")
    print(f"{'over all:':31s} {counts([s for samples in rows.values() for s in samples])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
