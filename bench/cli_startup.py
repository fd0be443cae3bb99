"""Wall time of `rngdctl submit`, `runs`, `show` and `cards` against `python -c pass`, as
median ratios.

Target (issues 2, 27 and 28): each at most 4x, for rngdctl as installed. Run:

    .venv/bin/python bench/cli_startup.py [--rounds 11] [--hog N]

``--hog N``: N busy-looping processes, each in a session of its own, run beside it (loaded).

Python compiles a module it has no bytecode for on every start. pip compiles an installed
package's bytecode; a checkout run with PYTHONDONTWRITEBYTECODE=1 (as on the team's machines)
and no __pycache__ compiles every project module from source each time. The script measures
both on a copy of the project in a temporary folder, which the commands import ahead of the
editable install, so the checkout's own __pycache__ (or its absence) changes nothing:

- "installed": the copy compiled with compileall, as pip does; the target is checked here;
- "from source": the copy without bytecode, PYTHONDONTWRITEBYTECODE=1; printed beside it.

Each round times `python -c pass` and the commands back to back, so machine noise hits
all of them; a command's ratio is the median over rounds of its time over that round's
`python -c pass`. Beside it, the CPU ratio: user and system time (the children's included)
over `python -c pass`'s. On a quiet host a one-process command's wall time is about its CPU
time; under load each start waits for a core alike and the wall ratio shrinks, the CPU
ratio much less (contention for the caches still raises it). `cards` reads in a child
process beside its own work, so with two idle cores its wall ratio is below its CPU ratio.

The home holds one queued run (what `submit` made): `runs` and `show` walk the queue's
estimates, and `show` reads a run with no step-model row. `cards` runs twice, furiosa-smi's
child process and the holder scan included: with the installed furiosa-smi 2026.4 binding
(on a host without a card: one line, exit 1) and with the 8-card stand-in of
tests/smi_fakes.py (exit 0).
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

TARGET = 4.0
TIMEOUT_S = 60.0
REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("rngdctl", "daemon", "trainer")
sys.path.insert(0, str(REPO / "tests"))

from smi_fakes import card, fake_binding


def wall(argv: list[str], cwd: Path, env: dict, exits=(0,)) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and the children it reaped).

    Waits in os.wait4, not subprocess's wait with a timeout: that polls with sleeps that
    double up to 50 ms, so every time it measured came out as about 31, 63, 113, 163 or
    213 ms, whatever the command took. The timeout is a timer that kills the command.
    """
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=cwd, env=env)
    killer = threading.Timer(TIMEOUT_S, proc.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in exits:
        raise SystemExit(f"{' '.join(argv[2:])} exited {proc.returncode}")
    return elapsed, usage.ru_utime + usage.ru_stime


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def copy_project(into: Path, *, compiled: bool) -> Path:
    """The project's packages copied under ``into`` (no __pycache__), compiled if asked."""
    for package in PACKAGES:
        shutil.copytree(REPO / package, into / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
        if compiled and not compileall.compile_dir(into / package, quiet=1):
            raise SystemExit(f"compileall failed on {package}")
    return into


def measure(project: Path, home: str, rounds: int, env: dict,
            stand_in: Path) -> dict[str, tuple[float, float, float]]:
    """Per command: (median seconds, median ratio to ``python -c pass``, median CPU ratio)."""
    rngdctl = [sys.executable, "-m", "rngdctl", "--home", home]
    with_cards = {**env, "PYTHONPATH": str(stand_in)}
    # name: (argv, environment, the exit codes it may end with)
    commands = {
        "rngdctl submit": ([*rngdctl, "submit", "--cards", "1", "--resident", "0"], env, (0,)),
        "rngdctl runs": ([*rngdctl, "runs"], env, (0,)),
        "rngdctl show": ([*rngdctl, "show", "1"], env, (0,)),
        # 1: no card (this host), or furiosa-smi not installed: its one line either way.
        "rngdctl cards": ([*rngdctl, "cards"], env, (0, 1)),
        "cards, 8 stand-in": ([*rngdctl, "cards"], with_cards, (0,)),
    }
    bare = [sys.executable, "-c", "pass"]
    rows = []
    for _ in range(rounds):
        base = wall(bare, project, env)
        rows.append((base, {name: wall(argv, project, command_env, exits)
                            for name, (argv, command_env, exits) in commands.items()}))
    out = {"python -c pass": (statistics.median(r[0][0] for r in rows), 1.0, 1.0)}
    for name in commands:
        out[name] = (statistics.median(r[1][name][0] for r in rows),
                     statistics.median(r[1][name][0] / r[0][0] for r in rows),
                     statistics.median(r[1][name][1] / r[0][1] for r in rows))
    return out


def run_all(rounds: int) -> dict[str, dict]:
    """Each condition's figures (``measure``) on its own copy of the project."""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        stand_in = fake_binding(tmp / "smi", [card(i, occupied=[0, 1]) for i in range(8)])
        for condition, compiled in (("installed", True), ("from source", False)):
            project = copy_project(tmp / condition.replace(" ", "-"), compiled=compiled)
            env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
            env.pop("PYTHONPATH", None)
            home = str(tmp / f"home-{project.name}")
            # First use creates the home, the database and run 1 (not timed).
            wall([sys.executable, "-m", "rngdctl", "--home", home, "submit", "--cards", "1",
                  "--resident", "0"], project, env)
            results[condition] = measure(project, home, rounds, env, stand_in)
    return results


def report(results: dict[str, dict]) -> list[str]:
    """Prints the figures; the commands past the target as installed."""
    failed = []
    for condition, rows in results.items():
        print(f"{condition}:" + (" (bytecode compiled, as pip installs it; the target)"
                                 if condition == "installed" else
                                 " (no bytecode: every module compiled on each start)"))
        for name, (seconds, ratio, cpu_ratio) in rows.items():
            line = f"  {name:<18} median {seconds * 1000:7.1f} ms"
            if name != "python -c pass":
                line += f"   ratio {ratio:.2f}x (CPU {cpu_ratio:.2f}x)"
                if condition == "installed":
                    line += f" (target <= {TARGET:g}x): " + ("PASS" if ratio <= TARGET else "FAIL")
                    if ratio > TARGET:
                        failed.append(name)
            print(line)
    return failed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--hog", type=int, default=0, metavar="N",
                        help="busy-looping processes beside the measurement (a loaded run)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(args.hog)]
    try:
        results = run_all(args.rounds)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print(f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}; {args.rounds} rounds "
          f"each; {args.hog} hog processes")
    return 1 if report(results) else 0


if __name__ == "__main__":
    sys.exit(main())
