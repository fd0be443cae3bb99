"""Recorded runs for the export tests, built with Store methods from constructed records."""

from __future__ import annotations

from daemon.store import DONE, Store
from trainer import records

T0 = 1_790_000_000.0  # a fixed clock (2026-09-21)


def make_step(n: int, step_s: float, loss: float, *, label: str = records.MAIN,
              tokens: int = 128, phases: dict | None = None,
              extra: dict | None = None) -> records.Step:
    return records.Step(config_label=label, step=n, loss=loss, step_s=step_s, tokens=tokens,
                        lr=1e-3, phases=phases or {}, time=T0 + 100 + n, extra=extra or {})


def record_run(store: Store, steps: list[records.Step], *, name: str | None = "r60",
               config: dict | None = None, status: str = DONE, loads=(1.5, 3.0),
               gate_loads=(0.5, 2.5), reason: str | None = None,
               baseline_config: dict | None = None, events=()) -> int:
    """A run queued, gated (blocked, then passed), launched, stepped, sampled and finished."""
    config = {"cards": 1, "resident": 2, "steps": 60, "model": "tiny-llama", "seq_len": 64,
              "accum": 2, "lr": 1e-3, "data": "synthetic", "seed": 0, "backend": "cpu",
              **(config or {})}
    run_id = store.add_run(config, name=name, now=T0)
    for i, load1 in enumerate(gate_loads):
        passed = i == len(gate_loads) - 1
        store.add_gate_check(run_id, [
            {"name": "host_load", "reading": load1, "threshold": "< 150", "verdict": "pass",
             "detail": ""},
            {"name": "device_idle", "reading": 0 if passed else 1, "threshold": "0 holders",
             "verdict": "pass" if passed else "fail", "detail": "pid 4121 holds npu0pe0"},
            {"name": "cards_free", "reading": None, "threshold": ">= 1", "verdict": "n/a",
             "detail": "local launcher: no Kubernetes cards to count"},
        ], passed, now=T0 + i)
    assert store.claim_for_launch(run_id, launcher="local", now=T0 + 10)
    store.update_run(run_id, status="running", git="b3cb03b", host="box",
                     versions={"torch": "2.13.0"})
    store.add_event(run_id, "launch", "started pid 4242", now=T0 + 10)
    if baseline_config is not None:
        store.add_pass(run_id, records.Start(records.BASELINE, baseline_config, time=T0 + 11))
    store.add_pass(run_id, records.Start(records.MAIN, config, time=T0 + 12))
    store.add_steps(run_id, steps)
    for i, load1 in enumerate(loads):
        store.add_sample(load=(load1, 1.0, 1.0), holders=[], run_id=run_id, now=T0 + 20 + i)
    for i, (kind, message) in enumerate(events):
        store.add_event(run_id, kind, message, now=T0 + 30 + i)
    store.finish_run(run_id, status, reason=reason, now=T0 + 200)
    return run_id


def drifting_steps() -> list[records.Step]:
    """60 steps: warm-up 9 s, 2.0 s to step 25, then 2.2 s (step 40: 3.0 s); a NaN at 30.

    Medians: 6-60 is 2.2 s, 6-25 is 2.0 s (drift +10 %). Losses: step 1 is 3.5,
    then 3.0 to 25 (mean 3.02), 2.5 to 50 (the NaN left out), 2.0 to 60.
    """
    def step_s(n):
        return 9.0 if n <= 5 else 2.0 if n <= 25 else 3.0 if n == 40 else 2.2

    def loss(n):
        if n == 1:
            return 3.5
        if n == 30:
            return float("nan")
        return 3.0 if n <= 25 else 2.5 if n <= 50 else 2.0

    return [make_step(n, step_s(n), loss(n)) for n in range(1, 61)]
