"""SIGKILL the daemon at random instants of launch, run and finish; count the damage.

Queues --runs runs (default 14) of --steps steps (default 30) of tiny-llama on
the CPU (1 card, seq 32), then --kills times (default 20): start
`rngdctl daemon --exit-when-idle --tick 0.2` and SIGKILL it at a random
instant of a launch, of a run or of a run's finish, in turn (see kill_once),
noting what the store showed at that instant. Then one daemon runs the queue
out. A thread runs `ps -ww -eo pid=,args=` every 50 ms all along and keeps the
most trainers of this home alive at once.

Checks: every run done; its steps 1..N, each stored once; one `start` record
per run in its output.log (one trainer per run ever ran); never 2 trainers
alive at once.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python bench/crash_kill.py [--kills 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from daemon.home import Home

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from procs import PsSampler, trainers

RUN = ["--cards", "1", "--resident", "2", "--seq-len", "32", "--accum", "1", "--lr", "1e-3",
       "--model", "tiny-llama"]


def rngdctl(home: Home, *args: str, env_extra: dict | None = None, **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RNGDCTL_FAULT", None)
    env.update(env_extra or {})
    return subprocess.Popen([sys.executable, "-m", "rngdctl", "--home", str(home.path), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            **kw)


def state(home: Home) -> str:
    """What the store shows now: launching (pid or not), running, or between runs."""
    with home.store() as store:
        active = store.active_runs()
        queued = store.queue()
    if active:
        run = active[0]
        if run["status"] == "launching":
            return "launching, pid stored" if run["pid"] else "launching, no pid stored"
        with home.store() as store:
            steps = sum(store.step_counts(run["id"]).values())
        return "running, no step yet" if steps == 0 else "running"
    return "between runs" if queued else "all finished"


def wait_until(predicate, timeout: float = 120.0, every: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    return None


def kill_once(home: Home, phase: str, rng: random.Random) -> str | None:
    """Start a daemon and SIGKILL it at a random instant of ``phase``; what the store showed.

    launch: at a fault point of the next launch (after_claim, after_spawn or
    after_record, chosen at random: these instants last microseconds, a timer
    would never hit them). run: 0-2 s after the running trainer's newest step
    is stored. finish: 0-0.5 s after the running trainer's process ended
    (before or after the daemon noticed, recorded it and claimed the next run).
    None when the daemon exited on its own: the queue is done.
    """
    env = {}
    if phase == "launch":
        env["RNGDCTL_FAULT"] = rng.choice(["after_claim", "after_spawn", "after_record"])
    daemon = rngdctl(home, "daemon", "--tick", "0.2", "--exit-when-idle", env_extra=env)
    if phase == "launch":
        try:
            code = daemon.wait(timeout=180)
        except subprocess.TimeoutExpired:
            code = None
        if code == -signal.SIGKILL:
            return f"{env['RNGDCTL_FAULT']}, {state(home)}"
        if code == 0:
            return None
    elif phase == "run":
        if not wait_until(lambda: state(home) == "running" or daemon.poll() is not None):
            raise RuntimeError("no run reached a stored step in 120 s")
        time.sleep(rng.uniform(0.0, 2.0))
    else:
        pids = wait_until(lambda: trainers(home) or daemon.poll() is not None)
        if pids is True or daemon.poll() is not None:
            return None
        wait_until(lambda: not psutil_alive(pids[0]), timeout=300)
        time.sleep(rng.uniform(0.0, 0.5))
    seen = state(home)
    if daemon.poll() is not None:
        return None
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    return seen


def psutil_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--runs", type=int, default=14)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        home = Home(Path(tmp) / "home").ensure()
        ids = []
        for _ in range(args.runs):
            proc = rngdctl(home, "submit", *RUN, "--steps", str(args.steps))
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            ids.append(int(out))
        sampler = PsSampler(home)
        sampler.start()
        hits: collections.Counter[str] = collections.Counter()
        t0 = time.monotonic()
        kills = 0
        while kills < args.kills:
            phase = ("launch", "run", "finish")[kills % 3]
            seen = kill_once(home, phase, rng)
            if seen is None:  # the queue ran out before this kill
                break
            kills += 1
            hits[f"{phase}: {seen}"] += 1
            print(f"kill {kills:2d} at {time.monotonic() - t0:6.1f} s, {phase}: {seen}",
                  flush=True)
        final = rngdctl(home, "daemon", "--tick", "0.2", "--exit-when-idle")
        _, err = final.communicate(timeout=900)
        sampler.stop.set()
        sampler.join()
        failures = []
        if final.returncode != 0:
            failures.append(f"the last daemon exited {final.returncode}: {err[-500:]}")
        lost = doubled = 0
        with home.store() as store:
            for run_id in ids:
                run = store.run(run_id)
                steps = [s["step"] for s in store.steps(run_id)]
                log = home.path / "runs" / str(run_id) / "output.log"
                starts = sum(1 for line in log.read_text(errors="replace").splitlines()
                             if line.startswith('{"kind":"start"'))
                lost += len(set(range(1, args.steps + 1)) - set(steps))
                doubled += len(steps) - len(set(steps))
                if run["status"] != "done":
                    failures.append(f"run {run_id} is {run['status']}: {run['exit_reason']}")
                if starts != 1:
                    failures.append(f"run {run_id}: {starts} trainers wrote a start record")
            adopted = len(store.events(kinds=["adopt"]))
        wall = time.monotonic() - t0
    print(f"\n{kills} SIGKILLs over {wall:.0f} s, {args.runs} runs x {args.steps} steps, "
          f"seed {args.seed}")
    for where, n in sorted(hits.items()):
        print(f"  killed while {where}: {n}")
    print(f"steps lost {lost}, steps doubled {doubled}, adopt events {adopted}")
    print(f"most trainers alive at once (ps, {sampler.samples} samples every 50 ms): "
          f"{sampler.most}")
    if sampler.most > 1:
        failures.append(f"2 trainers alive at once: {sampler.over[:3]}")
    if lost or doubled:
        failures.append("steps lost or doubled")
    for failure in failures:
        print("FAIL", failure)
    print("PASS" if not failures else "FAIL")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
