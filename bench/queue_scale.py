"""The queue at scale (issue 33): `runs`, `runs --json`, `show`, `plan`, a TUI frame and one
daemon tick with N queued runs and a finished baseline.

    .venv/bin/python bench/queue_scale.py [--sizes 1000,10000] [--repeat 5] [--frames 20]
        [--hog N]

For each size, builds a home (through Store methods) with one finished tiny-llama run whose
main pass ran all-offload (the baseline every queued run's estimate rests on) and N queued
runs: a sweep over cards, resident layers, steps and learning rate, every fifth with a
baseline pass, one in fifty held. Then measures:

- `rngdctl runs`, `runs --json`, `show` of the last queued run and `plan --model tiny-llama
  --steps 500`: the real CLI in a subprocess (wall time, and the CPU time from wait4), the
  median of ``--repeat``;
- the TUI: the app headless at 120x40 on the home, ``--frames`` refreshes one simulated second
  apart; per refresh the data (``ViewSource.build()``, its thread) and the frame (the UI
  thread's part: bench/tui_frame_time.py's ``render_frame``), in CPU time of that thread;
- the daemon: one tick in-process, the first (every queued run's first estimate stored) and
  the next (the queue unchanged), with the scheduler's own work (a launcher that reports
  every card busy, so the head waits at its gate check as a long queue's head does).

Targets: `runs` <= 0.5 s wall at 10,000 queued runs; the TUI frame's CPU p95 <= 40 ms (the
TUI's budget, bench/tui_frame_time.py); and linear: from the smallest size to the largest no
figure grows past the geometric mean of linear and quadratic growth (the ratio is printed
beside the sizes'; a fixed part such as start-up keeps it below the queue's own growth).
tests/queue/test_queue_scale.py counts the store's queries, which do not grow with the queue.
``--hog N`` measures loaded: N busy-looping processes beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cli_startup import wall
from machine import cpu_line, hogs
from tui_frame_time import TARGET_MS, percentile, render_frame

from daemon.gates.rules import ClusterReading
from daemon.home import Home
from daemon.run.spec import validate
from daemon.stepmodel import stats
from daemon.store import DONE
from trainer import records

RUNS_TARGET_S = 0.5
#: The size `runs`' target is for.
RUNS_TARGET_SIZE = 10_000
BASELINE_STEPS = 60
NOW = 1_790_000_000.0
SHAPE = {"layers": 4, "cards": 1, "resident_per_card": 0, "resident_layers": 0,
         "seq_len": 64, "accum": 2, "micro_batch": 1, "params_per_layer": 46_208}


def _step(n: int, step_s: float = 0.01) -> records.Step:
    phases = {"fwd_bwd": step_s * 0.6, "upload": step_s * 0.1, "download": step_s * 0.1,
              "host_optim": step_s * 0.1, "device_optim": step_s * 0.05, "wait": 0.0}
    return records.Step(records.MAIN, n, 4.0 - n * 1e-3, step_s * (1 + (n % 7) / 100), 128,
                        1e-5, phases, {}, time=NOW - 3600 + n, extra=SHAPE)


def sweep_config(i: int) -> dict:
    """The i-th queued run of a sweep: cards, resident layers, steps and lr vary."""
    return validate({"cards": 1 + i % 2, "resident": i % 3, "steps": 100 + 10 * (i % 50),
                     "seq_len": 64, "accum": 2, "lr": 1e-5 * (1 + i % 4),
                     "baseline": i % 5 == 0})


def build_home(path: Path, queued: int) -> Home:
    """A finished all-offload baseline of tiny-llama and ``queued`` queued runs."""
    home = Home(path).ensure()
    with home.store() as store:
        base = store.add_run(validate({"cards": 1, "resident": 0, "steps": BASELINE_STEPS,
                                       "seq_len": 64, "accum": 2}), name="baseline",
                             now=NOW - 4000)
        store.claim_for_launch(base, launcher="local", now=NOW - 3700)
        store.add_pass(base, records.Start(records.MAIN, {"backend": "cpu", **SHAPE},
                                           time=NOW - 3600))
        store.add_steps(base, [_step(n) for n in range(1, BASELINE_STEPS + 1)])
        store.finish_run(base, DONE, now=NOW - 3500)
        stats.seal(store, base)
        for i in range(queued):
            run = store.add_run(sweep_config(i), name=f"sweep-{i}", now=NOW - queued + i)
            if i % 50 == 49:
                store.set_held(run, True)
        store.daemon_started(pid=1, launcher="local", home=str(path), now=NOW - 3700)
        store.daemon_heartbeat(now=NOW)
    return home


def time_cli(home: Home, last: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Per command: (median wall s, median CPU s) of the real CLI in a subprocess."""
    cli = [sys.executable, "-m", "rngdctl", "--home", str(home.path)]
    commands = {"runs": ["runs"], "runs --json": ["runs", "--json"], "show": ["show", str(last)],
                "plan": ["plan", "--model", "tiny-llama", "--steps", "500"]}
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    out = {}
    for name, args in commands.items():
        times = [wall([*cli, *args], REPO, env) for _ in range(repeat)]
        out[name] = (statistics.median(t[0] for t in times),
                     statistics.median(t[1] for t in times))
    return out


class BusyCards:
    """A launcher that launches nothing: every card is busy, so the head waits at its gates."""

    name = "bench"

    def cluster_reading(self, run):
        return ClusterReading(cards_free=0, cards_detail="every card busy (bench)")

    def own_pids(self):
        return set()

    def launch(self, run):
        raise AssertionError("the bench's gates never pass")

    def follow(self, run):
        return None

    def recover(self, run):
        return None

    def cancel(self, run):
        pass

    def startup(self):
        pass

    def close(self):
        pass


def time_ticks(home: Home) -> tuple[float, float]:
    """CPU seconds of the daemon's first tick and of the next, in this thread."""
    from daemon.scheduling.loop import Daemon

    with home.store() as store:
        daemon = Daemon(home, store, home.config(), BusyCards(), clock=lambda: NOW)
        daemon.start()
        try:
            ticks = []
            for k in range(2):
                started = time.thread_time()
                daemon.tick(now=NOW + 5 * k)
                ticks.append(time.thread_time() - started)
        finally:
            daemon.close()
    return ticks[0], ticks[1]


async def _frames(home: Home, frames: int) -> tuple[list[float], list[float]]:
    from rngdctl.tui.app import RngdApp

    clock = {"now": NOW}
    app = RngdApp(home, clock=lambda: clock["now"], refresh_s=3600, freeze_gc=True)
    data_ms, frame_ms = [], []
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        source = app._view_source()
        for _ in range(frames):
            clock["now"] += 1.0
            started = time.thread_time()
            snapshot = source.build()
            data_ms.append((time.thread_time() - started) * 1000)
            frame_ms.append(render_frame(app, snapshot)[1])
            await pilot.pause()
    return data_ms, frame_ms


def measure(home: Home, size: int, args) -> dict:
    out = {"cli": time_cli(home, size + 1, args.repeat)}  # the baseline is run 1
    data, frame = asyncio.run(_frames(home, args.frames))
    out["tui"] = (statistics.median(data), percentile(data, 0.95),
                  statistics.median(frame), percentile(frame, 0.95))
    out["tick"] = time_ticks(home)
    return out


def report(sizes: list[int], results: dict[int, dict]) -> bool:
    rows = [(name, [results[n]["cli"][name][0] * 1000 for n in sizes],
             [results[n]["cli"][name][1] * 1000 for n in sizes])
            for name in results[sizes[0]]["cli"]]
    tui = {n: results[n]["tui"] for n in sizes}
    rows.append(("TUI data, median (thread CPU)", [tui[n][0] for n in sizes], None))
    rows.append(("TUI frame, p95 (UI thread CPU)", [tui[n][3] for n in sizes], None))
    rows.append(("daemon tick, first (CPU)", [results[n]["tick"][0] * 1000 for n in sizes], None))
    rows.append(("daemon tick, next (CPU)", [results[n]["tick"][1] * 1000 for n in sizes], None))
    grow = sizes[-1] / sizes[0]
    print("\n| what (ms) | " + " | ".join(f"{n:,} queued" for n in sizes)
          + f" | x{grow:g} queue |")
    print("| --- |" + " --- |" * (len(sizes) + 1))
    for name, values, cpu in rows:
        cells = [f"{v:.0f}" + (f" (CPU {c:.0f})" if cpu else "")
                 for v, c in zip(values, cpu or values)]
        print(f"| {name} | " + " | ".join(cells) + f" | x{values[-1] / values[0]:.1f} |")
    checks = []
    if RUNS_TARGET_SIZE in results:
        runs_s = results[RUNS_TARGET_SIZE]["cli"]["runs"][0]
        checks.append((f"runs <= {RUNS_TARGET_S} s at {RUNS_TARGET_SIZE:,} queued runs",
                       runs_s <= RUNS_TARGET_S, f"{runs_s:.2f} s"))
    worst = max(tui[n][3] for n in sizes)
    checks.append((f"TUI frame p95 <= {TARGET_MS:.0f} ms of CPU", worst <= TARGET_MS,
                   f"{worst:.1f} ms at worst"))
    # Linear or quadratic: from the smallest queue to the largest a linear figure grows at
    # most as the queue (x grow; less with a fixed part such as start-up), a quadratic one as
    # its square. The line between them is their geometric mean, grow ** 1.5, so that noise
    # on a loaded host does not pass for a power.
    steepest = max(values[-1] / values[0] for _, values, _ in rows)
    linear = (f"every figure linear: grows at most x{grow ** 1.5:.0f} for a x{grow:g} queue "
              f"(quadratic: x{grow ** 2:g})")
    checks.append((linear, steepest <= grow ** 1.5, f"steepest x{steepest:.1f}"))
    for what, ok, detail in checks:
        print(f"- {'met' if ok else 'MISSED'}: {what} ({detail})")
    return all(ok for _, ok, _ in checks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="queued runs, comma-separated")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--hog", type=int, metavar="N", default=0,
                        help="busy-looping processes beside the measurement (a loaded run)")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    print(cpu_line())
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        homes = {}
        for size in sizes:  # built before the hogs start: they load the measuring only
            started = time.perf_counter()
            homes[size] = build_home(Path(tmp) / f"home-{size}", size)
            print(f"{size:,} queued runs: built in {time.perf_counter() - started:.1f} s",
                  flush=True)
        with hogs(args.hog):
            results = {size: measure(homes[size], size, args) for size in sizes}
    print(f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}; {args.hog} hog "
          f"processes; CLI: median of {args.repeat}, TUI: {args.frames} refreshes")
    return 0 if report(sizes, results) else 1


if __name__ == "__main__":
    sys.exit(main())
