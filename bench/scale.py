"""What reading a run costs as it grows: 3,000 to 1,000,000 steps.

Builds one home (through Store methods, steps in batches of 50,000 under
``Store.bulk_load``'s large page cache) with two runs per size, one finished
and one running: a 200-step baseline pass and a main pass of that many steps,
with phases, samples, a gate check and events. Each finished run is then
sealed as the daemon seals a run that ends (``stats.seal``, timed); ``show``
is also timed before the seal. The running run is never sealed: its reads
walk from the order markers ``add_steps`` keeps, and its plots are kept after
each batch as ingest keeps them (``plots.keep_plots``). Then, for each run,
times the real CLI in a subprocess and reads its peak RSS (``os.wait4``):
``show``, ``show --json``, ``export``, ``runs``, ``model --resident-from``
(the main pass gives the device optimizer's cost) and the TUI's data refresh
(``ViewSource.build()`` for the run, what the TUI does on its first refresh);
for the running run ``show``, ``show --json``, the TUI's data refresh and
``export`` (once: its target is its RSS). The median of ``--repeat`` runs; the
RSS is the largest. Prints a
markdown table, checks the targets, and with ``--write`` puts the table in
docs/performance.md between the scale-table markers.

Targets: show on the largest run <= 2x show on the 3,000-step run (same
benchmark run) and <= 150 MB RSS, finished and running; export of the
largest run <= 300 MB RSS, finished and running.

    nice -n 5 .venv/bin/python bench/scale.py --sizes 10000,100000,1000000 --write
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from daemon.home import Home
from daemon.run import plots
from daemon.stepmodel import stats
from daemon.store import DONE, RUNNING, Store
from trainer import records

REPO = Path(__file__).resolve().parents[1]
PERFORMANCE_MD = REPO / "docs" / "performance.md"
BEGIN, END = "<!-- scale-table:begin -->", "<!-- scale-table:end -->"
SMALL = 3_000
BASELINE_STEPS = 200
BATCH = 50_000
SHAPE = {"layers": 8, "cards": 2, "seq_len": 512, "accum": 4, "micro_batch": 1,
         "params_per_layer": 1_000_000}
PHASES = {"fwd_bwd": 1.2, "upload": 0.9, "download": 0.8, "host_optim": 1.1,
          "device_optim": 0.3, "wait": 0.01}

#: What is timed on the running runs (besides every command on the finished ones).
RUNNING_COMMANDS = ("show", "show --json", "TUI data refresh", "export")

TUI_REFRESH = ("import sys, time; from daemon.home import Home; "
               "from rngdctl.tui.data import ViewSource; "
               "home = Home(sys.argv[1]); s = home.store().__enter__(); "
               "ViewSource(s, home=home.path, run_ref=int(sys.argv[2])).build()")


def _steps(label: str, first: int, last: int, resident: int, rng: random.Random):
    extra = {**SHAPE, "resident_per_card": resident, "resident_layers": resident * 2}
    scale = 1.0 - 0.05 * resident
    for n in range(first, last + 1):
        jitter = 1.0 + rng.random() / 20
        phases = {k: v * scale * jitter for k, v in PHASES.items()}
        yield records.Step(label, n, 3.0 - n * 1e-6, sum(phases.values()) * 1.01, 4096, 1e-5,
                           phases, {"rss_gb": 12.0}, time=1000.0 + 4 * n, extra=extra)


def build_run(store: Store, steps: int, rng: random.Random, *, running: bool = False) -> int:
    """A run with a baseline pass and ``steps`` main steps: finished, or ``running`` (never
    sealed, its plots kept batch by batch as ingest keeps them)."""
    run = store.add_run({"cards": 2, "resident": 1, "steps": steps, "model": "tiny-llama",
                         "seq_len": 512, "accum": 4, "baseline": True, "backend": "cpu"},
                        name=f"scale-{steps}{'-running' if running else ''}")
    store.add_gate_check(run, [{"name": "host_load", "reading": 1.0, "threshold": "< 150",
                                "verdict": "pass", "detail": ""}], True, now=1.0)
    if running:  # several at once in one home: no claim (one run at a time), its state set
        store.update_run(run, status=RUNNING, launcher="local", started=2.0, attempts=1)
    else:
        store.claim_for_launch(run, launcher="local", now=2.0)
    store.add_pass(run, records.Start(records.BASELINE, {**SHAPE, "resident_layers": 0}, time=3.0))
    store.add_pass(run, records.Start(records.MAIN, {**SHAPE, "resident_layers": 1}, time=4.0))
    store.add_steps(run, _steps(records.BASELINE, 1, BASELINE_STEPS, 0, rng))
    if running:
        plots.keep_plots(store, run, [records.BASELINE])
    for first in range(1, steps + 1, BATCH):
        store.add_steps(run, _steps(records.MAIN, first, min(steps, first + BATCH - 1), 1, rng))
        if running:
            plots.keep_plots(store, run, [records.MAIN])
    for i in range(0, steps, 100):  # a sample every 100 steps
        store.add_sample(load=(1.0 + i % 7, 1.0, 1.0), holders=[], run_id=run,
                         now=1000.0 + 4 * i)
    store.add_event(run, "launch", "pid 1", now=5.0)
    if not running:
        store.finish_run(run, DONE, now=1000.0 + 4 * steps)
    return run


# The peak RSS of a process started from this one would count this process's own
# (Linux keeps the larger of the old and new image's high-water mark at exec, and
# Popen execs from a vfork of this process): a small wrapper forks and execs the
# command, and reports its wall time and peak RSS from wait4.
WRAPPER = """import os, sys, time
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{time.perf_counter() - started} {usage.ru_maxrss}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measure(argv: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one subprocess."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as out:
        proc = subprocess.run([sys.executable, "-c", WRAPPER, out.name, *argv],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                              cwd=REPO, check=False)
        if proc.returncode:
            err = proc.stderr.decode(errors="replace").strip()[:500]
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err}")
        wall, rss_kib = out.read().split()
    return float(wall), int(rss_kib) / 1024  # KiB on Linux


def commands(home: Path, run: int, out: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "rngdctl", "--home", str(home)]
    return {
        "show": [*cli, "show", str(run)],
        "show --json": [*cli, "show", str(run), "--json"],
        "export": [*cli, "export", str(run), "--out", str(out)],
        "runs": [*cli, "runs"],
        "model": [*cli, "model", "--baseline", str(run), "--cards", "2", "--resident", "2",
                  "--resident-from", str(run)],
        "TUI data refresh": [sys.executable, "-c", TUI_REFRESH, str(home), str(run)],
    }


def host_line() -> str:
    model = "unknown CPU"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10,
                             check=False).stdout
        found = re.search(r"Model name:\s*(.+)", out)
        model = found[1].strip() if found else model
    except (OSError, subprocess.SubprocessError):
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"load average {load} at the end (loaded: colleagues' work on the same cores)")


def fmt_row(name: str, cells: list[tuple[float, float]]) -> str:
    return f"| {name} | " + " | ".join(f"{w:.2f} s, {r:.0f} MB" for w, r in cells) + " |"


def write_table(text: str) -> None:
    doc = PERFORMANCE_MD.read_text(encoding="utf-8")
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + block + rest.split(END, 1)[1]
    else:
        doc = doc.rstrip("\n") + "\n\n## Scale\n\n" + block + "\n"
    PERFORMANCE_MD.write_text(doc, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000",
                        help="main-pass steps of the runs besides the 3,000-step one")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="update docs/performance.md")
    parser.add_argument("--keep", type=Path, help="build the home here and keep it")
    args = parser.parse_args()
    sizes = [SMALL, *(int(s) for s in args.sizes.split(","))]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(args.keep or Path(tmp) / "home").ensure()
        rng = random.Random(0)
        runs, build_s = {}, {}
        running, running_build_s = {}, {}
        with home.store() as store, store.bulk_load():
            for n in sizes:
                started = time.perf_counter()
                runs[n] = build_run(store, n, rng)
                build_s[n] = time.perf_counter() - started
                print(f"built {n:,} steps in {build_s[n]:.1f} s", flush=True)
            for n in sizes:
                started = time.perf_counter()
                running[n] = build_run(store, n, rng, running=True)
                running_build_s[n] = time.perf_counter() - started
                print(f"built {n:,} running steps in {running_build_s[n]:.1f} s", flush=True)
        unsealed: list[tuple[float, float]] = []
        seal_s: list[float] = []
        for n in sizes:  # show as a running run reads: before the daemon's seal
            argv = commands(home.path, runs[n], Path(tmp))["show"]
            unsealed.append(measure(argv, env))
            with home.store() as store:
                started = time.perf_counter()
                stats.seal(store, runs[n])
                seal_s.append(time.perf_counter() - started)
            print(f"{n:>9,} show, unsealed {unsealed[-1][0]:6.2f} s {unsealed[-1][1]:5.0f} MB;"
                  f" sealed in {seal_s[-1]:.2f} s", flush=True)
        db = home.path / "rngdctl.db"
        size = sum(p.stat().st_size for p in home.path.glob("rngdctl.db*"))
        total = 2 * (sum(sizes) + BASELINE_STEPS * len(sizes))  # finished and running
        per_million = size / total * 1e6 / 1e6
        results: dict[str, list[tuple[float, float]]] = {}
        for n in sizes:
            for name, argv in commands(home.path, runs[n], Path(tmp) / f"notes-{n}").items():
                walls, rss = [], []
                for _ in range(args.repeat):
                    w, r = measure(argv, env)
                    walls.append(w)
                    rss.append(r)
                results.setdefault(name, []).append((statistics.median(walls), max(rss)))
                print(f"{n:>9,} {name:<17} {statistics.median(walls):6.2f} s "
                      f"{max(rss):5.0f} MB", flush=True)
        for n in sizes:  # a running run: markers and kept plots, never sealed
            argvs = commands(home.path, running[n], Path(tmp) / f"notes-running-{n}")
            for name in RUNNING_COMMANDS:
                walls, rss = [], []
                # export's check is its RSS, and at 1,000,000 steps it takes a minute: once.
                for _ in range(1 if name == "export" else args.repeat):
                    w, r = measure(argvs[name], env)
                    walls.append(w)
                    rss.append(r)
                results.setdefault(f"{name}, running run", []).append(
                    (statistics.median(walls), max(rss)))
                print(f"{n:>9,} {name + ', running':<26} {statistics.median(walls):6.2f} s "
                      f"{max(rss):5.0f} MB", flush=True)
        del db
    header = "| command | " + " | ".join(f"{n:,} steps" for n in sizes) + " |"
    lines = [header, "| --- |" + " --- |" * len(sizes)]
    lines += [fmt_row(name, cells) for name, cells in results.items()]
    lines.append(fmt_row("show, before the seal (one run)", unsealed))
    lines.append("| seal (once, when the run ends) | "
                 + " | ".join(f"{s:.2f} s" for s in seal_s) + " |")
    lines.append("| build (Store methods) | "
                 + " | ".join(f"{build_s[n]:.1f} s" for n in sizes) + " |")
    lines.append("| build, running run (Store methods, plots kept per batch) | "
                 + " | ".join(f"{running_build_s[n]:.1f} s" for n in sizes) + " |")
    show, live = results["show"], results["show, running run"]
    checks = [
        ("show, largest run <= 2x the 3,000-step run", show[-1][0] <= 2 * show[0][0],
         f"{show[-1][0]:.2f} s against {show[0][0]:.2f} s ({show[-1][0] / show[0][0]:.2f}x)"),
        ("show, largest run <= 150 MB RSS", show[-1][1] <= 150, f"{show[-1][1]:.0f} MB"),
        ("export, largest run <= 300 MB RSS", results["export"][-1][1] <= 300,
         f"{results['export'][-1][1]:.0f} MB"),
        ("show, largest running run <= 2x the 3,000-step running run",
         live[-1][0] <= 2 * live[0][0],
         f"{live[-1][0]:.2f} s against {live[0][0]:.2f} s ({live[-1][0] / live[0][0]:.2f}x)"),
        ("show, largest running run <= 150 MB RSS", live[-1][1] <= 150, f"{live[-1][1]:.0f} MB"),
        ("export, largest running run <= 300 MB RSS",
         results["export, running run"][-1][1] <= 300,
         f"{results['export, running run'][-1][1]:.0f} MB"),
    ]
    text = "\n".join([
        *lines, "",
        (f"Store on disk: {per_million:.0f} MB per million steps ({size / 1e6:.0f} MB for "
         f"{total:,} steps, indexes and WAL included). Wall time is the median of "
         f"{args.repeat} runs of the real CLI in a subprocess, start-up included; RSS the "
         f"largest peak (`os.wait4` in a forked wrapper, so the benchmark's own RSS is not counted)."),
        f"Host: {host_line()}.",
        (f"Command: `nice -n {os.nice(0)} .venv/bin/python bench/scale.py --sizes {args.sizes}"
         f"{' --repeat ' + str(args.repeat) if args.repeat != 3 else ''} --write`."), "",
        *[f"- {'met' if ok else 'MISSED'}: {what} ({detail})" for what, ok, detail in checks],
    ])
    print(text)
    if args.write:
        write_table(text)
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
