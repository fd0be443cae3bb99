"""The queue a researcher drives: dependencies, priorities, edits and clones.

Library functions behind ``submit --after/--priority``, ``edit``, ``clone``
and ``wait``; the click commands are thin over them. SQL stays in
``daemon/store/``; run configs are validated by ``daemon/run/spec.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from daemon.errors import BadInput
from daemon.run.spec import apply_settings, config_diff, validate
from daemon.store import CANCELLED, DONE, FAILED, FINISHED, OOM, QUEUED, TIMEOUT


def resolve_after(store, ref) -> int | None:
    """The id of the run a new run waits for (--after); one that can never be done is refused."""
    if ref is None:
        return None
    dep = store.run(ref)
    if dep["status"] in FINISHED and dep["status"] != DONE:
        raise BadInput(f"--after {ref}: run {dep['id']} already ended {dep['status']}, so this "
                       "run could never start")
    return dep["id"]


def queue_run(store, config: dict, *, after=None, priority: int | None = None,
              notify: str | None = None) -> int:
    """Queue a validated config, waiting for ``after`` (id or name) and at ``priority``.

    ``notify``: the run's notifier command (checked here; '' turns the default off).
    """
    if notify is not None:
        # Only here: the notifier's module (threads, subprocesses) costs submit 18 ms to load.
        from daemon.scheduling.notify import parse_command

        parse_command(notify)
    return store.add_run(config, name=config.get("name"), after=resolve_after(store, after),
                         priority=priority or 0, notify=notify)


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


def edit_run(store, ref, settings: list[str], *, host=None) -> tuple[dict, dict]:
    """Change a queued run's config (validated as submit does, ``host`` too); returns (run,
    changes)."""
    run = store.run(ref)
    if run["status"] != QUEUED:
        raise BadInput(f"run {run['id']} is {run['status']}: only a queued run can be edited "
                       "(clone it instead)")
    if not settings:
        raise BadInput("give at least one --set key=value")
    config = apply_settings(run["config"], settings, host=host)
    changes = config_diff(run["config"], config)
    if changes:
        if not store.replace_queued_config(run["id"], config):
            now = store.run(run["id"])["status"]
            raise BadInput(f"run {run['id']} is {now}: it left the queue while being edited")
        store.add_event(run["id"], "edit", f"edited: {_describe(changes)}",
                        data={"changes": {k: list(v) for k, v in changes.items()}})
    return store.run(run["id"]), changes


def clone_run(store, ref, settings: list[str], *, host=None) -> tuple[int, dict]:
    """Queue a copy of any run's config, with changes; returns (new run id, changes).

    The copy keeps the priority and the notifier; it waits for nothing (--after is
    not copied). Validated as submit does (``host`` too).
    """
    run = store.run(ref)
    config = apply_settings(run["config"], settings, host=host)
    changes = config_diff(run["config"], config)
    new_id = store.add_run(config, name=config.get("name"), priority=run.get("priority") or 0,
                           notify=run.get("notify"))
    store.add_event(new_id, "clone", f"cloned from run {run['id']}"
                    + (f": {_describe(changes)}" if changes else ""),
                    data={"from": run["id"], "changes": {k: list(v) for k, v in changes.items()}})
    return new_id, changes


# === restart =================================================================

#: What ``restart --all-failed`` restarts: every way a run can fail, and a run the
#: daemon cancelled because the run it waited for (--after) failed.
FAILED_STATUSES = (FAILED, OOM, TIMEOUT)


def _failed_runs(store) -> list[dict]:
    """Failed runs no run was restarted from yet, oldest first (dependencies before dependents)."""
    runs = store.failed_not_restarted((*FAILED_STATUSES, CANCELLED))
    return [r for r in runs if r["status"] != CANCELLED
            or store.events(run_id=r["id"], kinds=["dependency"])]


def _restart_after(store, run: dict) -> tuple[int | None, str]:
    """What the restart of ``run`` waits for: its --after run's newest restart, else that run.

    A dependency that ended other than done and was not restarted is dropped
    (the restart could never start behind it), and the text says so.
    """
    dep = run.get("after_run")
    if dep is None:
        return None, ""
    while restarts := store.restarts_of(dep):
        dep = restarts[-1]
    status = store.run(dep)["status"]
    if status in FINISHED and status != DONE:
        return None, f"; not after run {dep}, which ended {status}"
    return dep, f"; after run {dep}"


def restart_runs(store, refs, *, all_failed: bool = False, host=None,
                 refused: Callable[[dict, str], None] | None = None) -> list[tuple[int, int]]:
    """Queue a new run from each ended run named, and each failed one with ``all_failed``.

    pueue's restart without --in-place: the old run and its steps stay as they
    were; the new one copies its config, name, priority and notifier, and
    remembers where it came from (``restart_of``). Returns (old id, new id) pairs.

    Each config goes through submit's validation again (``host`` too), so a run that
    failed because it could never run is not queued again: a run named is refused
    (BadInput, nothing queued); with ``all_failed`` one found is passed over and
    ``refused(run, why)`` told.
    """
    if not refs and not all_failed:
        raise BadInput("give the runs to restart, or --all-failed")
    runs = []
    for ref in refs:
        run = store.run(ref)
        if run["status"] not in FINISHED:
            raise BadInput(f"run {run['id']} is {run['status']}: only an ended run can be "
                           "restarted")
        _revalidate(run, host)
        runs.append(run)
    if all_failed:
        named = {r["id"] for r in runs}
        for run in _failed_runs(store):
            if run["id"] in named:
                continue
            try:
                _revalidate(run, host)
            except BadInput as exc:
                if refused is not None:
                    refused(run, str(exc))
                continue
            runs.append(run)
    pairs: list[tuple[int, int]] = []
    for run in sorted({r["id"]: r for r in runs}.values(), key=lambda r: r["id"]):
        after, after_text = _restart_after(store, run)
        new_id = store.add_run(run["config"], name=run.get("name"), after=after,
                               priority=run.get("priority") or 0, notify=run.get("notify"),
                               restart_of=run["id"])
        why = (run.get("exit_reason") or "").splitlines()[0] if run.get("exit_reason") else ""
        store.add_event(new_id, "restart", f"restarted from run {run['id']} ({run['status']}"
                        + (f": {why}" if why else "") + ")" + after_text,
                        data={"from": run["id"], "after": after})
        pairs.append((run["id"], new_id))
    return pairs


def _revalidate(run: dict, host) -> None:
    """A restart's config must still pass submit's validation (BadInput naming the run)."""
    try:
        validate(run["config"], host=host)
    except BadInput as exc:
        raise BadInput(f"run {run['id']} not restarted: {exc}") from None


# === resume (issue 26) =======================================================

#: Ended runs ``resume`` puts back in the queue: every end but done.
RESUMABLE = (FAILED, CANCELLED, TIMEOUT, OOM)


def resume_runs(store, refs, *, now: float | None = None) -> list[tuple[int, dict | None]]:
    """Put each ended run named back in the queue as itself: same id, same output folder.

    Its trainer then goes on from the newest checkpoint there (``--resume
    auto``), and the steps it makes again are stored once (the store keeps the
    first copy). Returns (id, the newest checkpoint event's data or None) pairs.
    """
    if not refs:
        raise BadInput("give the runs to resume")
    runs = []
    for ref in refs:
        run = store.run(ref)
        if run["status"] == DONE:
            raise BadInput(f"run {run['id']} is done: nothing to resume (`rngdctl restart "
                           f"{run['id']}` runs it again)")
        if run["status"] not in RESUMABLE:
            raise BadInput(f"run {run['id']} is {run['status']}: only an ended run can be "
                           "resumed")
        runs.append(run)
    out = []
    for run in runs:
        if not store.requeue_ended(run["id"], RESUMABLE):
            raise BadInput(f"run {run['id']} changed while it was being resumed; try again")
        written = store.events(run_id=run["id"], kinds=["checkpoint"], limit=1)
        newest = written[-1].get("data") if written else None
        where = (f"goes on from {newest.get('path')} (main step {newest.get('step')})"
                 if newest else "no checkpoint was recorded: the trainer goes on from one it "
                                "finds in the output folder, else starts over")
        store.add_event(run["id"], "resume_requested", f"queued again after it ended "
                        f"{run['status']}: {where}", data={"checkpoint": newest}, now=now)
        out.append((run["id"], newest))
    return out


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
