"""What a data set costs the trainer before its first step: seconds and peak memory.

    OMP_NUM_THREADS=1 .venv/bin/python bench/trainer_data_bounds.py held-out [--mb 17]
    OMP_NUM_THREADS=1 .venv/bin/python bench/trainer_data_bounds.py data [--mb 16 64]

``held-out``: issue 36's case, a 17 MB held-out file (the NSMC sample's rows repeated) beside
the NSMC sample as training data; runs ``python -m trainer train --steps 1`` and prints the
seconds from the trainer's start to its first step record and its peak RSS, once with the
default ``--eval-max-examples`` and once with every example evaluated (``--all``: as before
the bound, when the 17 MB set took 1.6 GB and 76 s before step 1).

``data``: the trainer's peak RSS over a synthetic-data run of the same shape, per byte of a
``--data`` file of each size (NSMC rows again): what ``--max-data-bytes``'s default
(trainer/datafile.py) is judged by.

Both read the NSMC sample's rows (../shared/data/nsmc/ratings_train_sample.txt, or
``--nsmc PATH``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NSMC = REPO.parent / "shared" / "data" / "nsmc" / "ratings_train_sample.txt"
TRAIN = ["--steps", "1", "--seq-len", "64", "--accum", "2", "--seed", "0"]


def nsmc_file(path: Path, mb: float) -> Path:
    """The NSMC sample's rows repeated to ``mb`` MB, with its header."""
    header, *rows = NSMC.read_text(encoding="utf-8").splitlines(keepends=True)
    body = "".join(rows).encode()
    with path.open("wb") as f:
        f.write(header.encode())
        written = 0
        while written < mb * 1e6:
            f.write(body)
            written += len(body)
    return path


def to_first_step(args: list[str], cache: str) -> tuple[float, float]:
    """(seconds from start to the first step record, peak RSS in GB) of one trainer run."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "RNGDCTL_CACHE": cache}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "train", *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first = None
    for line in proc.stdout:
        if first is None and '"kind":"step"' in line:
            first = time.perf_counter() - t0
    _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not all children's
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"the trainer failed: {' '.join(args)}")
    return first or float("nan"), usage.ru_maxrss / 1e6


def held_out(mb: float, every: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        big = nsmc_file(Path(tmp) / "held-out.txt", mb)
        args = [*TRAIN, "--data", f"nsmc:{NSMC}", "--eval-data", f"nsmc:{big}"]
        if every:
            args += ["--eval-max-examples", str(10 ** 9)]
        seconds, peak = to_first_step(args, tmp)
    what = "every example" if every else "the default --eval-max-examples"
    print(f"held-out {mb:g} MB, {what}: first step after {seconds:.1f} s, peak RSS {peak:.2f} GB")


def data(sizes: list[float]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _, base = to_first_step([*TRAIN, "--data", "synthetic"], tmp)
        print(f"synthetic data: peak RSS {base:.2f} GB")
        for mb in sizes:
            path = nsmc_file(Path(tmp) / f"data-{mb:g}.txt", mb)
            _, peak = to_first_step([*TRAIN, "--data", f"nsmc:{path}", "--max-data-bytes",
                                     str(10 ** 12)], tmp)
            size = path.stat().st_size
            print(f"--data {size / 1e6:.1f} MB: peak RSS {peak:.2f} GB, "
                  f"{(peak - base) * 1e9 / size:.1f} bytes of memory per byte of data")


def main() -> int:
    global NSMC
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=("held-out", "data"))
    ap.add_argument("--mb", type=float, nargs="+", default=None)
    ap.add_argument("--all", action="store_true", help="held-out: also evaluate every example")
    ap.add_argument("--nsmc", type=Path, default=NSMC, help="the NSMC sample's rows")
    args = ap.parse_args()
    NSMC = args.nsmc
    if not NSMC.exists():
        print(f"the NSMC sample is not at {NSMC}")
        return 1
    if args.case == "held-out":
        mb = (args.mb or [17.0])[0]
        held_out(mb, every=False)
        if args.all:
            held_out(mb, every=True)
    else:
        data(args.mb or [16.0, 64.0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
