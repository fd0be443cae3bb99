"""Wall time of `rngdctl submit` against `python -c pass`, as a median ratio.

Target (issue 2): at most 4x. Run: .venv/bin/python bench/cli_startup.py [--rounds 9]
Each round times both commands back to back, so machine noise hits both.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = 4.0


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        submit = [sys.executable, "-m", "rngdctl", "--home", home, "submit", "--cards", "1",
                  "--resident", "0"]
        runs = [sys.executable, "-m", "rngdctl", "--home", home, "runs"]
        bare = [sys.executable, "-c", "pass"]
        wall(submit)  # first use creates the home and the database
        rows = [(wall(bare), wall(submit), wall(runs)) for _ in range(args.rounds)]
    bare_s = statistics.median(r[0] for r in rows)
    submit_s = statistics.median(r[1] for r in rows)
    runs_s = statistics.median(r[2] for r in rows)
    ratio = statistics.median(r[1] / r[0] for r in rows)
    print(f"rounds: {args.rounds}")
    print(f"python -c pass   median {bare_s * 1000:7.1f} ms")
    print(f"rngdctl submit   median {submit_s * 1000:7.1f} ms")
    print(f"rngdctl runs     median {runs_s * 1000:7.1f} ms")
    print(f"submit / bare    median ratio {ratio:.2f}x (target <= {TARGET:g}x): "
          + ("PASS" if ratio <= TARGET else "FAIL"))
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
