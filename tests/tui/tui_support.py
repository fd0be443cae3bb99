"""A recorded session for the TUI tests (a module of its own: ``from conftest import``
picks whichever conftest pytest loaded last).

The session: run 1 (r60) done, run 2 (oom-try) out of memory, run 3 (r200)
running with a baseline pass, run 4 (next) at the head of the queue and
blocked 14 minutes by a foreign device holder, run 5 (later) held. Built
with Store methods and trainer.records objects only.
"""

from __future__ import annotations

import subprocess
import time
import uuid

from textual.geometry import Region
from textual.widgets import DataTable

from daemon.store import Store
from trainer import records

T0 = 1_790_000_000.0
NOW = T0 + 7200.0  # the app's clock in every test
HOLDER = {"pid": 4121, "user": "kim", "cmdline": "python bench.py",
          "files": ["/dev/rngd/npu0pe0-3"], "started": NOW - 900}

BASELINE_PHASES = {"fwd_bwd": 1.0, "upload": 0.5, "download": 0.3, "host_optim": 3.2,
                   "device_optim": 0.05, "wait": 0.0}
MAIN_PHASES = {"fwd_bwd": 1.2, "upload": 0.4, "download": 0.2, "host_optim": 2.4,
               "device_optim": 0.2, "wait": 0.03}


def r200_step_s(n: int) -> float:
    """Warm-up 9 s; then 4.43 s, with 4.40 s at steps 15, 25, ... and 4.9 s at 10, 20, ...

    Steps 6-130: 101 x 4.43, 11 x 4.40, 13 x 4.9: the median is 4.43 s.
    """
    if n <= 5:
        return 9.0
    return 4.9 if n % 10 == 0 else 4.40 if n % 10 == 5 else 4.43


def _step(n, step_s, loss, *, label=records.MAIN, tokens=2048, phases=None, extra=None,
          t=None):
    return records.Step(config_label=label, step=n, loss=loss, step_s=step_s, tokens=tokens,
                        lr=1e-5, phases=phases or {}, memory={"host_peak_gb": 12.5},
                        time=t, extra=extra or {})


def _gates(run_id_running: int, blocked: bool) -> list[dict]:
    return [
        {"name": "host_load", "reading": 3.2, "threshold": "< 150", "verdict": "pass",
         "detail": "load 3.2 / 2.50 / 2.00"},
        {"name": "device_idle", "reading": 1 if blocked else 0, "threshold": "0 holders",
         "verdict": "fail" if blocked else "pass",
         "detail": ("pid 4121 python bench.py (kim) holds /dev/rngd/npu0pe0-3" if blocked
                    else "no process holds a device file")},
        {"name": "cards_free", "reading": None, "threshold": ">= 2", "verdict": "n/a",
         "detail": "local launcher: no Kubernetes cards to count"},
        {"name": "image_present", "reading": None, "threshold": "present", "verdict": "n/a",
         "detail": "local launcher: runs the installed trainer"},
        {"name": "one_at_a_time", "reading": 1, "threshold": "0 active", "verdict": "fail",
         "detail": f"run {run_id_running} is running"},
    ]


def fill(store: Store) -> dict[str, int]:
    """The recorded session; returns the run ids by name."""
    ids = {}
    base = {"model": "tiny-llama", "data": "synthetic", "lr": 1e-5, "seed": 0,
            "backend": "cpu"}

    # 1. r60: done, 60 steps, 2.0 s from step 6.
    ids["r60"] = rid = store.add_run({**base, "cards": 1, "resident": 2, "steps": 60,
                                      "seq_len": 64, "accum": 2}, name="r60", now=T0)
    store.claim_for_launch(rid, launcher="local", now=T0 + 10)
    store.update_run(rid, status="running")
    store.add_steps(rid, [_step(n, 6.0 if n <= 5 else 2.0, 3.0 - n / 60, tokens=128,
                                t=T0 + 20 + 2 * n) for n in range(1, 61)])
    store.finish_run(rid, "done", now=T0 + 200)

    # 2. oom-try: out of memory after 12 steps.
    ids["oom-try"] = rid = store.add_run({**base, "cards": 2, "resident": 16, "steps": 200,
                                          "seq_len": 512, "accum": 4}, name="oom-try",
                                         now=T0 + 300)
    store.claim_for_launch(rid, launcher="local", now=T0 + 310)
    store.update_run(rid, status="running")
    store.add_steps(rid, [_step(n, 5.5, 1.9, t=T0 + 320 + 6 * n) for n in range(1, 13)])
    store.add_event(rid, "end", "oom: device out of memory", now=T0 + 400)
    store.finish_run(rid, "oom", reason="device out of memory (resident AdamW state)",
                     now=T0 + 400)

    # 3. r200: running, a 10-step all-offload baseline, then 130 of 200 main steps, its
    # held-out loss every 25 steps (falling slower than the train loss), saving to /scratch.
    main_config = {**base, "cards": 2, "resident": 8, "steps": 200, "seq_len": 512,
                   "accum": 4, "baseline": True, "baseline_steps": 10,
                   "out": "/scratch/kim/r200", "eval_every": 25}
    ids["r200"] = rid = store.add_run(main_config, name="r200", now=T0 + 1000)
    store.claim_for_launch(rid, launcher="local", now=NOW - 1300)
    store.update_run(rid, status="running", pid=4242, log_path=None)
    shape = {"layers": 32, "cards": 2, "seq_len": 512, "accum": 4}
    store.add_pass(rid, records.Start(records.BASELINE, {**main_config, "resident": 0},
                                      time=NOW - 1290))
    store.add_steps(rid, [
        _step(n, 5.05, 2.1, label=records.BASELINE, phases=BASELINE_PHASES,
              extra={**shape, "resident_per_card": 0}, t=NOW - 1290 + 5 * n)
        for n in range(1, 11)])
    store.add_pass(rid, records.Start(records.MAIN, main_config, time=NOW - 1230))
    store.add_steps(rid, [
        _step(n, r200_step_s(n), 2.0 - n / 200, phases=MAIN_PHASES,
              extra={**shape, "resident_per_card": 8}, t=NOW - 1230 + 4.5 * n)
        for n in range(1, 131)])
    store.add_evals(rid, [records.Eval(records.MAIN, n, 2.1 - n / 400, 4096, 64, 0.8,
                                       time=NOW - 1230 + 4.5 * n) for n in range(0, 131, 25)])
    store.add_event(rid, "launch", "started pid 4242", now=NOW - 1300)
    store.add_event(rid, "compile", "head graphs compiled in 94 s", now=NOW - 1200)

    # 4. next: head of the queue, blocked since 14 minutes by kim's bench.py.
    ids["next"] = rid = store.add_run({**base, "cards": 2, "resident": 8, "steps": 200,
                                       "seq_len": 512, "accum": 4, "baseline": True},
                                      name="next", now=NOW - 1800)
    store.add_gate_check(rid, _gates(ids["r200"], blocked=False), True, now=NOW - 1500)
    for ago in (840, 600, 300, 3):
        store.add_gate_check(rid, _gates(ids["r200"], blocked=True), False, now=NOW - ago)

    # 5. later: held.
    ids["later"] = rid = store.add_run({**base, "cards": 1, "resident": 4, "steps": 100,
                                        "seq_len": 512, "accum": 4}, name="later",
                                       now=NOW - 600)
    store.set_held(rid, True)

    # Host samples over the last hour (load 2-11), kim's holder in the newest.
    for i in range(60):
        store.add_sample(load=(2.0 + i % 10, 2.5, 2.0), holders=[], now=NOW - 3600 + 60 * i)
    store.add_sample(load=(3.2, 2.5, 2.0), holders=[HOLDER], run_id=ids["r200"], now=NOW - 1)

    store.daemon_started(pid=4000, launcher="local", home="/home/kim/.local/share/rngdctl",
                         node="npu-node-1", now=T0)
    store.daemon_heartbeat(now=NOW - 2)
    return ids




def text_of(node, selector: str) -> str:
    """What a person sees in the widget: its rendered lines, right-trimmed."""
    widget = node.query_one(selector)
    lines = widget.render_lines(Region(0, 0, widget.size.width, widget.size.height))
    return "\n".join(line.text.strip() for line in lines).strip("\n")


def table_rows(app, selector: str) -> list[list[str]]:
    """A DataTable's cells as the plain strings a person reads."""
    table = app.query_one(selector, DataTable)
    return [[str(getattr(c, "plain", c)) for c in table.get_row_at(i)]
            for i in range(table.row_count)]


class Pane:
    """One tmux session on its own server socket, so no user session is touched."""

    def __init__(self, command: list[str], env: dict):
        self.socket = f"rngdctl-test-{uuid.uuid4().hex[:8]}"
        self._tmux("new-session", "-d", "-s", "tui", "-x", "120", "-y", "40",
                   "env", *(f"{k}={v}" for k, v in env.items()), *command)

    def _tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=False,
                              capture_output=True, text=True, timeout=10)

    def text(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "tui").stdout

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "tui", *keys)

    def alive(self) -> bool:
        return self._tmux("has-session", "-t", "tui").returncode == 0

    def wait_for(self, predicate, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = predicate(self.text())
            if found:
                return found
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; the pane shows:\n{self.text()}")

    def close(self) -> None:
        self._tmux("kill-server")

    def bell_rung(self) -> bool:
        """Whether the app rang the terminal's bell (tmux flags the window; detached, even
        the current one)."""
        flag = self._tmux("display-message", "-p", "-t", "tui", "#{window_bell_flag}")
        return flag.stdout.strip() == "1"
