"""Wall time of `rngdctl submit`, `runs`, `show` and `cards` against `python -c pass`, as
median ratios.

Target (issues 2, 27, 28 and 33): each at most 4x, for rngdctl as the README installs it
(`make`: an editable install), on the slowest host of its kind, the worse of a quiet and a
loaded run. Run:

    .venv/bin/python bench/cli_startup.py [--rounds 11] [--hog N] [--instructions]

``--hog N``: N busy-looping processes, each in a session of its own, run beside it (loaded).
The first line names the CPU (lscpu's model name, AVX2, AVX-512).

Three conditions, each its own home:

- "editable" (the target): the venv's own `rngdctl` script, from a folder outside the
  checkout, so that setuptools' editable finder resolves the packages to this checkout, with
  the bytecode Python writes on a first run (one untimed run of each command first), as a
  user of the README has it. Only where this venv's editable install is this checkout (else
  it says so, and the target is checked on "installed"). `python -c pass` beside it runs
  the same finder at start-up (site imports it, with pathlib); its cost is printed:
  the commands import pathlib anyway, so with a plain path entry
  (`pip install -e . --config-settings editable_mode=compat`) `python -c pass` is that much
  faster and each ratio larger, the commands themselves about as fast;
- "installed": a copy of the packages in a temporary folder, compiled with compileall as
  pip compiles a regular install, run as `python -m rngdctl` from there (imported ahead of
  the editable install), PYTHONDONTWRITEBYTECODE=1;
- "from source": the same copy without bytecode (PYTHONDONTWRITEBYTECODE=1, as on the team's
  machines): every module compiled on each start.

Each round times `python -c pass` and the commands back to back, so machine noise hits
all of them; a command's ratio is the median over rounds of its time over that round's
`python -c pass`. Beside it, the CPU ratio: user and system time (the children's included)
over `python -c pass`'s. On a quiet host a one-process command's wall time is about its CPU
time; under load each start waits for a core alike and the wall ratio shrinks, the CPU
ratio much less (contention for the caches still raises it). `cards` reads in a child
process beside its own work, so with two idle cores its wall ratio is below its CPU ratio.

``--instructions``: also the instructions each command executes (valgrind's cachegrind, once
each, in the target's condition), against `python -c pass`'s: the same on a loaded host as on
a quiet one, a check of a change where timings are noise (it is not the target).

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
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

TARGET = 4.0
TIMEOUT_S = 60.0
REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("rngdctl", "daemon", "trainer")
sys.path.insert(0, str(REPO / "tests"))

from machine import cpu_line, hogs
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


def copy_project(into: Path, *, compiled: bool) -> Path:
    """The project's packages copied under ``into`` (no __pycache__), compiled if asked."""
    for package in PACKAGES:
        shutil.copytree(REPO / package, into / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
        if compiled and not compileall.compile_dir(into / package, quiet=1):
            raise SystemExit(f"compileall failed on {package}")
    return into


@dataclass(frozen=True)
class Condition:
    """How the commands run: the folder they start in, their environment, `rngdctl` itself."""

    name: str
    cwd: Path
    env: dict
    rngdctl: tuple[str, ...]  # argv before --home


def measure(condition: Condition, home: str, rounds: int,
            stand_in: Path) -> dict[str, tuple[float, float, float]]:
    """Per command: (median seconds, median ratio to ``python -c pass``, median CPU ratio)."""
    cwd, env = condition.cwd, condition.env
    commands = startup_commands(condition, home, stand_in)
    bare = [sys.executable, "-c", "pass"]
    rows = []
    for _ in range(rounds):
        base = wall(bare, cwd, env)
        rows.append((base, {name: wall(argv, cwd, command_env, exits)
                            for name, (argv, command_env, exits) in commands.items()}))
    out = {"python -c pass": (statistics.median(r[0][0] for r in rows), 1.0, 1.0)}
    for name in commands:
        out[name] = (statistics.median(r[1][name][0] for r in rows),
                     statistics.median(r[1][name][0] / r[0][0] for r in rows),
                     statistics.median(r[1][name][1] / r[0][1] for r in rows))
    return out


def startup_commands(condition: Condition, home: str, stand_in: Path) -> dict[str, tuple]:
    """name: (argv, environment, the exit codes it may end with)."""
    rngdctl = [*condition.rngdctl, "--home", home]
    env = condition.env
    with_cards = {**env, "PYTHONPATH": str(stand_in)}
    return {
        "rngdctl submit": ([*rngdctl, "submit", "--cards", "1", "--resident", "0"], env, (0,)),
        "rngdctl runs": ([*rngdctl, "runs"], env, (0,)),
        "rngdctl show": ([*rngdctl, "show", "1"], env, (0,)),
        # 1: no card (this host), or furiosa-smi not installed: its one line either way.
        "rngdctl cards": ([*rngdctl, "cards"], env, (0, 1)),
        "cards, 8 stand-in": ([*rngdctl, "cards"], with_cards, (0,)),
    }


def editable(tmp: Path) -> Condition | str:
    """The README's install: this venv's `rngdctl` script, its editable finder resolving the
    packages to this checkout, with bytecode written; or why it cannot be measured here."""
    script = Path(sys.executable).with_name("rngdctl")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    outside = tmp / "outside"  # no package of the checkout in the folder it starts in
    outside.mkdir(exist_ok=True)
    found = subprocess.run([sys.executable, "-c", "import rngdctl; print(rngdctl.__file__)"],
                           capture_output=True, text=True, cwd=outside, env=env,
                           timeout=TIMEOUT_S, check=False).stdout.strip()
    if not script.is_file():
        return f"no {script}: rngdctl is not installed in this venv"
    if Path(found or "/").resolve() != (REPO / "rngdctl" / "__init__.py").resolve():
        return (f"this venv's rngdctl is {found or 'not importable'}, not this checkout's "
                f"(make in {REPO} installs it)")
    return Condition("editable", outside, env, (str(script),))


def finder_ms(cwd: Path, env: dict, rounds: int) -> float | None:
    """Median ms that `python -c pass` spends importing the editable finder (-X importtime,
    its cumulative time), or None when no finder is installed."""
    found = []
    for _ in range(rounds):
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], cwd=cwd,
                             env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                             check=False).stderr
        line = re.search(r"import time:\s+\d+ \|\s+(\d+) \|\s+__editable__\S*finder", err)
        if line is None:
            return None
        found.append(int(line[1]) / 1000)
    return statistics.median(found)


def instructions(argv: list[str], cwd: Path, env: dict) -> int | None:
    """Instructions ``argv`` executes (valgrind's cachegrind), or None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    err = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                          "--cachegrind-out-file=/dev/null", *argv], cwd=cwd, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         timeout=20 * TIMEOUT_S, check=False).stderr
    found = re.search(r"I\s+refs:\s+([\d,]+)", err)
    return int(found[1].replace(",", "")) if found else None


def count_instructions(condition: Condition, home: str, stand_in: Path) -> dict[str, int]:
    bare = instructions([sys.executable, "-c", "pass"], condition.cwd, condition.env)
    if bare is None:
        return {}
    out = {"python -c pass": bare}
    for name, (argv, env, _) in startup_commands(condition, home, stand_in).items():
        out[name] = instructions(argv, condition.cwd, env) or 0
    return out


def run_all(rounds: int, with_instructions: bool) -> tuple[dict, dict]:
    """Each condition's figures (``measure``), and what else it found: the editable finder's
    cost, why a condition was not measured, the instruction counts."""
    results, notes = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        stand_in = fake_binding(tmp / "smi", [card(i, occupied=[0, 1]) for i in range(8)])
        quiet_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        quiet_env.pop("PYTHONPATH", None)
        conditions = []
        found = editable(tmp)
        if isinstance(found, str):
            notes["editable"] = found
        else:
            conditions.append(found)
        for name, compiled in (("installed", True), ("from source", False)):
            project = copy_project(tmp / name.replace(" ", "-"), compiled=compiled)
            conditions.append(Condition(name, project, quiet_env,
                                        (sys.executable, "-m", "rngdctl")))
        for condition in conditions:
            home = str(tmp / f"home-{condition.name.replace(' ', '-')}")
            # First use creates the home, the database and run 1 (not timed); in the editable
            # condition each command once more, so the checkout's bytecode is written.
            commands = startup_commands(condition, home, stand_in)
            warm = [commands["rngdctl submit"]]
            if condition.name == "editable":
                warm += [commands[name] for name in commands if name != "rngdctl submit"]
            for argv, env, exits in warm:
                wall(argv, condition.cwd, env, exits)
            results[condition.name] = measure(condition, home, rounds, stand_in)
            if condition.name == "editable":
                notes["finder_ms"] = finder_ms(condition.cwd, condition.env, rounds)
        target = conditions[0]
        if with_instructions:
            notes["instructions"] = (target.name, count_instructions(
                target, str(tmp / f"home-{target.name.replace(' ', '-')}"), stand_in))
    return results, notes


def report(results: dict[str, dict], notes: dict) -> list[str]:
    """Prints the figures; the commands past the target in its condition."""
    failed = []
    target = "editable" if "editable" in results else "installed"
    if "editable" in notes:
        print(f"editable: not measured: {notes['editable']}; the target is checked on "
              "installed")
    for condition, rows in results.items():
        print(f"{condition}:" + {
            "editable": " (the venv's rngdctl script, the editable finder, bytecode written; "
                        "the target)",
            "installed": " (a copy compiled as pip compiles it, python -m rngdctl"
                         + ("; the target)" if target == "installed" else ")"),
            "from source": " (no bytecode: every module compiled on each start)"}[condition])
        for name, (seconds, ratio, cpu_ratio) in rows.items():
            line = f"  {name:<18} median {seconds * 1000:7.1f} ms"
            if name != "python -c pass":
                line += f"   ratio {ratio:.2f}x (CPU {cpu_ratio:.2f}x)"
                if condition == target:
                    line += f" (target <= {TARGET:g}x): " + ("PASS" if ratio <= TARGET else "FAIL")
                    if ratio > TARGET:
                        failed.append(name)
            print(line)
    if notes.get("finder_ms") is not None:
        print(f"the editable finder: {notes['finder_ms']:.1f} ms of python -c pass's start "
              "(-X importtime; site imports it, and pathlib with it, which every command "
              "imports anyway)")
    if "instructions" in notes:
        condition, counts = notes["instructions"]
        if not counts:
            print("instructions: valgrind is not installed")
        else:
            bare = counts["python -c pass"]
            print(f"instructions ({condition}, valgrind): python -c pass {bare / 1e6:.0f} M; "
                  + ", ".join(f"{name.removeprefix('rngdctl ')} {n / 1e6:.0f} M "
                              f"({n / bare:.2f}x)" for name, n in counts.items()
                              if name != "python -c pass"))
    return failed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--hog", type=int, default=0, metavar="N",
                        help="busy-looping processes beside the measurement (a loaded run)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each command's instructions (valgrind)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with hogs(args.hog):
        results, notes = run_all(args.rounds, args.instructions)
    print(f"{cpu_line()}; load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}; "
          f"{args.rounds} rounds each; {args.hog} hog processes")
    return 1 if report(results, notes) else 0


if __name__ == "__main__":
    sys.exit(main())
