"""Wall time of `rngdctl cards` against `python -c pass`, as a median ratio (as
bench/cli_startup.py measures `submit`).

Target (issue 27): at most 4x. Run: .venv/bin/python bench/cards_startup.py [--rounds 9]
Each round times the commands back to back, so machine noise hits them alike. `cards`
is timed twice: with the real furiosa-smi 2026.4 binding (on a machine without a card it
answers "no RNGD card", exit 1) and with the 8-card stand-in (tests/smi_fakes.py). Both
include furiosa-smi's child process and the holder scan.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from smi_fakes import card, fake_binding

TARGET = 4.0


def wall(argv: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    print(subprocess.run(["sh", "-c", "lscpu | grep 'Model name'"], capture_output=True,
                         text=True, check=False).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        site = fake_binding(Path(tmp), [card(i, occupied=[0, 1]) for i in range(8)])
        stand_in = {**os.environ, "PYTHONPATH": str(site)}
        cards = [sys.executable, "-m", "rngdctl", "--home", str(Path(tmp) / "home"), "cards"]
        bare = [sys.executable, "-c", "pass"]
        wall(cards)  # first use creates the home and the database
        load = os.getloadavg()[0]
        rows = [(wall(bare), wall(cards), wall(cards, stand_in)) for _ in range(args.rounds)]
    bare_s = statistics.median(r[0] for r in rows)
    real_s = statistics.median(r[1] for r in rows)
    fake_s = statistics.median(r[2] for r in rows)
    real_ratio = statistics.median(r[1] / r[0] for r in rows)
    fake_ratio = statistics.median(r[2] / r[0] for r in rows)
    print(f"rounds: {args.rounds}, load average before: {load:.1f} on {os.cpu_count()} cores")
    print(f"python -c pass                  median {bare_s * 1000:7.1f} ms")
    print(f"rngdctl cards (real, no card)   median {real_s * 1000:7.1f} ms, ratio {real_ratio:.2f}x")
    print(f"rngdctl cards (stand-in, 8)     median {fake_s * 1000:7.1f} ms, ratio {fake_ratio:.2f}x")
    worst = max(real_ratio, fake_ratio)
    print(f"cards / bare    worse median ratio {worst:.2f}x (target <= {TARGET:g}x): "
          + ("PASS" if worst <= TARGET else "FAIL"))
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
