"""The queue a researcher drives: dependencies, priorities, edits and clones.

Library functions behind ``submit --after/--priority``, ``edit``, ``clone``
and ``wait``; the click commands are thin over them. SQL stays in
``daemon/store.py``; run configs are validated by ``daemon/runspec.py``.
"""

from __future__ import annotations

import time

from daemon.errors import BadInput
from daemon.runspec import apply_settings, config_diff
from daemon.store import DONE, FINISHED, QUEUED


def resolve_after(store, ref) -> int | None:
    """The id of the run a new run waits for (--after); one that can never be done is refused."""
    if ref is None:
        return None
    dep = store.run(ref)
    if dep["status"] in FINISHED and dep["status"] != DONE:
        raise BadInput(f"--after {ref}: run {dep['id']} already ended {dep['status']}, so this "
                       "run could never start")
    return dep["id"]


def queue_run(store, config: dict, *, after=None, priority: int | None = None) -> int:
    """Queue a validated config, waiting for ``after`` (id or name) and at ``priority``."""
    return store.add_run(config, name=config.get("name"), after=resolve_after(store, after),
                         priority=priority or 0)


def waiting_for(store, run: dict) -> dict | None:
    """What a queued run with --after waits for: the run and its status; None once it may go."""
    dep_id = run.get("after_run")
    if run["status"] != QUEUED or dep_id is None:
        return None
    dep = store.run(dep_id)
    if dep["status"] == DONE:
        return None
    return {"run": dep_id, "status": dep["status"],
            "text": f"waits for run {dep_id} ({dep['status']}) to be done (--after)"}


# === edit and clone ==========================================================


def _describe(changes: dict) -> str:
    return ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())


def edit_run(store, ref, settings: list[str]) -> tuple[dict, dict]:
    """Change a queued run's config (validated as submit does); returns (run, changes)."""
    run = store.run(ref)
    if run["status"] != QUEUED:
        raise BadInput(f"run {run['id']} is {run['status']}: only a queued run can be edited "
                       "(clone it instead)")
    if not settings:
        raise BadInput("give at least one --set key=value")
    config = apply_settings(run["config"], settings)
    changes = config_diff(run["config"], config)
    if changes:
        if not store.replace_queued_config(run["id"], config):
            now = store.run(run["id"])["status"]
            raise BadInput(f"run {run['id']} is {now}: it left the queue while being edited")
        store.add_event(run["id"], "edit", f"edited: {_describe(changes)}",
                        data={"changes": {k: list(v) for k, v in changes.items()}})
    return store.run(run["id"]), changes


def clone_run(store, ref, settings: list[str]) -> tuple[int, dict]:
    """Queue a copy of any run's config, with changes; returns (new run id, changes).

    The copy keeps the priority; it waits for nothing (--after is not copied).
    """
    run = store.run(ref)
    config = apply_settings(run["config"], settings)
    changes = config_diff(run["config"], config)
    new_id = store.add_run(config, name=config.get("name"), priority=run.get("priority") or 0)
    store.add_event(new_id, "clone", f"cloned from run {run['id']}"
                    + (f": {_describe(changes)}" if changes else ""),
                    data={"from": run["id"], "changes": {k: list(v) for k, v in changes.items()}})
    return new_id, changes


# === wait ====================================================================


def wait_for_runs(store, refs, *, timeout: float | None = None, interval: float = 2.0,
                  on_end=None, clock=time.monotonic, sleep=time.sleep) -> tuple[dict, list]:
    """Poll the store until every run has ended, or ``timeout`` seconds passed.

    ``on_end(run)`` is called once per run as it ends (at once for one that has
    ended already), in the order they are seen to end. Returns ({id: status} of
    the runs that ended, [ids still not ended]).
    """
    ids = list(dict.fromkeys(store.run(ref)["id"] for ref in refs))  # unknown: NoSuchRun first
    pending, ended = list(ids), {}
    deadline = None if timeout is None else clock() + timeout
    while True:
        for run_id in list(pending):
            run = store.run(run_id)
            if run["status"] in FINISHED:
                pending.remove(run_id)
                ended[run_id] = run["status"]
                if on_end is not None:
                    on_end(run)
        if not pending or (deadline is not None and clock() >= deadline):
            return ended, pending
        sleep(interval if deadline is None else max(0.0, min(interval, deadline - clock())))
