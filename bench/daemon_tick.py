"""The daemon's own CPU at the default tick: idle, and while following a run.

Starts the real daemon (local launcher, the home's default tick) in a fresh
home, lets it settle, then reads its own user+system CPU time from
/proc/<pid>/stat (the trainer is a child: its CPU is not counted) over
``--seconds`` idle, and over ``--seconds`` while it follows a tiny-llama
run on the CPU trainer (one thread, about 10 steps a second). Target: <= 1 %
of a core in both.

    nice -n 5 .venv/bin/python bench/daemon_tick.py --seconds 60
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = 0.01


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def share(pid: int, seconds: float) -> float:
    cpu, started = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu) / (time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=12.0)
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        cli = [sys.executable, "-m", "rngdctl", "--home", f"{tmp}/home"]
        daemon = subprocess.Popen([*cli, "daemon", "--launcher", "local"], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(args.settle)
            idle = share(daemon.pid, args.seconds)
            print(f"idle: {idle:.2%} of a core over {args.seconds:.0f} s", flush=True)
            run = subprocess.run(
                [*cli, "submit", "--cards", "1", "--resident", "0", "--steps", "1000000",
                 "--model", "tiny-llama", "--data", "synthetic", "--seq-len", "64",
                 "--accum", "1", "--backend", "cpu"],
                cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True,
            ).stdout.strip()
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                out = subprocess.run([*cli, "show", run], cwd=REPO, env=env, timeout=60,
                                     capture_output=True, text=True, check=False).stdout
                if "main: " in out:
                    break
                time.sleep(2)
            else:
                raise SystemExit("the run never stored a main-pass step")
            following = share(daemon.pid, args.seconds)
            out = subprocess.run([*cli, "show", run], cwd=REPO, env=env, timeout=60,
                                 capture_output=True, text=True, check=False).stdout
            line = next((x.strip() for x in out.splitlines() if "main: " in x), "")
            print(f"following a run: {following:.2%} of a core over {args.seconds:.0f} s "
                  f"({line})", flush=True)
            subprocess.run([*cli, "cancel", run], cwd=REPO, env=env, timeout=60,
                           capture_output=True, check=False)
            time.sleep(6)
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
    ok = idle <= TARGET and following <= TARGET
    print(f"target (<= 1 % of a core, idle and following): {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
