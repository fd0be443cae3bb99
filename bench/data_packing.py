"""--pack on the NSMC sample at seq 512: real tokens a second, packed against padded (issue
35: >= 4x).

    OMP_NUM_THREADS=1 .venv/bin/python bench/data_packing.py [--steps 30] [--rounds 2]
        [--micro-batch 4] [--nsmc PATH]

Runs ``python -m trainer train`` on tiny-llama (its tokenizer trained on the sample, cached
once) padded and packed, alternately, ``--rounds`` times each, and reads the step records:
a step's ``tokens`` are its real (non-padding) tokens, so real tokens a second is the sum of
the tokens of steps 6-N over the sum of their ``step_s``. Also prints what needs no clock,
from the start records: rows and padding share each way, and the real tokens a row carries
packed against padded (the ratio a step's cost, the same shape either way, turns into
tokens a second). Exits 1 when that deterministic ratio is under 4.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NSMC = REPO.parent / "shared" / "data" / "nsmc" / "ratings_train_sample.txt"
STEADY = 6  # the first steps warm the allocator and caches (the step model's rule too)


def run(data: Path, steps: int, micro_batch: int, pack: bool, cache: str) -> tuple[dict, float]:
    """(the start record's data, real tokens a second over steps 6-N) of one trainer run."""
    argv = [sys.executable, "-m", "trainer", "train", "--model", "tiny-llama",
            "--data", f"nsmc:{data}", "--seq-len", "512", "--accum", "1",
            "--micro-batch", str(micro_batch), "--steps", str(steps), "--lr", "1e-3",
            "--seed", "0", "--cache-dir", cache, *(["--pack"] if pack else [])]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=3600, check=True).stdout
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    start = next(r for r in records if r["kind"] == "start")
    steady = [r for r in records if r["kind"] == "step" and r["step"] >= STEADY]
    return start["data"], sum(r["tokens"] for r in steady) / sum(r["step_s"] for r in steady)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--nsmc", type=Path, default=NSMC)
    args = p.parse_args(argv)
    rates: dict[bool, list[float]] = {False: [], True: []}
    data: dict[bool, dict] = {}
    with tempfile.TemporaryDirectory(prefix="rngdctl-bench-pack-") as cache:
        for _ in range(args.rounds):
            for pack in (False, True):
                data[pack], rate = run(args.nsmc, args.steps, args.micro_batch, pack, cache)
                rates[pack].append(rate)
                print(f"{'packed' if pack else 'padded'}: {rate:,.0f} real tok/s", flush=True)
    per_row = {k: d["real_tokens"] / d["rows"] for k, d in data.items()}
    for pack in (False, True):
        d = data[pack]
        print(f"{'packed' if pack else 'padded'}: {d['rows']:,} rows of 512, padding "
              f"{d['padding_share']:.1%}, {per_row[pack]:.1f} real tokens a row")
    rows_ratio = per_row[True] / per_row[False]
    measured = min(rates[True]) / max(rates[False])
    print(f"real tokens a row, packed / padded: {rows_ratio:.2f}x (target >= 4x: "
          f"{'met' if rows_ratio >= 4 else 'NOT met'})")
    print(f"real tok/s, worst packed / best padded: {measured:.2f}x (target >= 4x: "
          f"{'met' if measured >= 4 else 'NOT met'})")
    return 0 if rows_ratio >= 4 else 1


if __name__ == "__main__":
    sys.exit(main())
