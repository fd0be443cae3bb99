"""Which stored run prices a model: the newest of its runs with an all-offload pass of steady
steps. ``rngdctl plan``, ``submit --cards best`` and the queue's estimates ask it.

Its own module, light to import: `runs` and `show` estimate the queue through it, and
``daemon.scheduling.plan`` (its dataclasses cost them 17 million instructions at start-up)
has nothing else they need.
"""

from __future__ import annotations

from daemon import stepmodel
from daemon.errors import BadInput
from daemon.store import STEADY_FIRST


def find_baseline(store, model: str) -> int:
    """The newest run of ``model`` whose all-offload pass has steady steps (6-N)."""
    # The store's STEADY_FIRST (stats.WARMUP_STEPS + 1), not daemon.stepmodel.stats: `runs`
    # loads no statistics before any run has steps.
    needed = STEADY_FIRST
    # Only runs with steps: a queued run has no baseline, and a sweep queues thousands (issue
    # 33: reading every run here, once per queued run, made `runs` quadratic in the queue).
    for run in store.runs_with_steps():
        if str(run["config"].get("model")) != model:
            continue
        base = stepmodel.baseline_of(store, run["id"])
        if base is not None and base.stats.steps >= needed:
            return run["id"]
    raise BadInput(f"no baseline for model {model!r} in the store: no run of it has an "
                   f"all-offload pass of {needed} steps or more; queue one: rngdctl submit "
                   f"--model {model} --cards 1 --baseline")
