"""The queue a researcher drives: dependencies, priorities, edits and clones.

Library functions behind ``submit --after/--priority``, ``edit``, ``clone``
and ``resume`` (``wait``: waiting.py); the click commands are thin over them. SQL stays in
``daemon/store/``; run configs are validated by ``daemon/run/spec.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from daemon.errors import BadInput
from daemon.run.claims import check_run_output
from daemon.run.spec import apply_settings, config_diff, parse_setting, validate
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


# === names ===================================================================
# A run is named by id or by --name, so a name is one run's: `show NAME` never has to pick
# between two. submit and edit refuse a name taken; clone and restart take NAME-2, NAME-3...

#: The longest name (daemon/run/spec.py's rule), and the room a copy's "-N" may take.
NAME_MAX, SUFFIX_MAX = 63, 6


def check_name(store, name: str | None, *, run_id: int | None = None) -> None:
    """BadInput (one line) when a run other than ``run_id`` already has ``name``."""
    if name is None:
        return
    other = store.run_named(name)
    if other is not None and other != run_id:
        raise BadInput(f"--name {name!r} is run {other}'s already: a name is one run's; give "
                       f"another (`rngdctl clone {other}` names its copy {free_name(store, name)})")


def free_name(store, name: str | None) -> str | None:
    """``name`` when no run has it, else the first of ``name-2``, ``name-3``... that none has
    (shortened to fit the 63 characters a name may have)."""
    if name is None:
        return None
    taken = store.names_starting(name[:NAME_MAX - SUFFIX_MAX])
    if name not in taken:
        return name
    n = 2
    while True:
        suffix = f"-{n}"
        candidate = name[:NAME_MAX - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
        n += 1


def queue_run(store, config: dict, *, after=None, priority: int | None = None,
              notify: str | None = None, now: float | None = None) -> int:
    """Queue a validated config, waiting for ``after`` (id or name) and at ``priority``.

    ``notify``: the run's notifier command (checked here; '' turns the default off).
    A ``name`` another run has is refused.
    """
    check_name(store, config.get("name"))
    if notify is not None:
        # Only here: the notifier's module (threads, subprocesses) costs submit 18 ms to load.
        from daemon.scheduling.notify import parse_command

        parse_command(notify)
    check_run_output(store, config)
    return store.add_run(config, name=config.get("name"), after=resolve_after(store, after),
                         priority=priority or 0, notify=notify, now=now)


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
    if "name" in changes:
        check_name(store, config.get("name"), run_id=run["id"])
    if "out" in changes:
        check_run_output(store, config, run_id=run["id"])
    if changes:
        # Only here: submit, which loads this module, needs no checkpoint reader.
        from daemon.run.resumable import check_edit

        check_edit(store, run, config, settings)  # one that will resume: its checkpoint's keys
        if not store.replace_queued_config(run["id"], config):
            now = store.run(run["id"])["status"]
            raise BadInput(f"run {run['id']} is {now}: it left the queue while being edited")
        store.add_event(run["id"], "edit", f"edited: {_describe(changes)}",
                        data={"changes": {k: list(v) for k, v in changes.items()}})
    return store.run(run["id"]), changes


def clone_run(store, ref, settings: list[str], *, host=None) -> tuple[int, dict]:
    """Queue a copy of any run's config, with changes; returns (new run id, changes).

    The copy keeps the priority and the notifier; it waits for nothing (--after is
    not copied). Its name is the run's with ``-2``, ``-3``... (``free_name``), or the one
    ``--set name=`` gives, which no run may have. It writes to its own folder, not to the
    ``--out`` of the run it copies, which stays that run's (``--set out=DIR`` for another).
    Validated as submit does (``host`` too).
    """
    run = store.run(ref)
    config = apply_settings(own_output(run["config"]), settings, host=host)
    if "name" in dict(parse_setting(s) for s in settings):
        check_name(store, config.get("name"))
    elif config.get("name") is not None:
        config = {**config, "name": free_name(store, config["name"])}
    changes = config_diff(run["config"], config)
    check_run_output(store, config)
    new_id = store.add_run(config, name=config.get("name"), priority=run.get("priority") or 0,
                           notify=run.get("notify"))
    store.add_event(new_id, "clone", f"cloned from run {run['id']}"
                    + (f": {_describe(changes)}" if changes else ""),
                    data={"from": run["id"], "changes": {k: list(v) for k, v in changes.items()}})
    return new_id, changes


def own_output(config: dict) -> dict:
    """A copied run's config with the copied run's ``--out`` dropped: that folder is the
    copied run's, and the copy gets its own default folder (``HOME/runs/<id>/model``)."""
    return {k: v for k, v in config.items() if k != "out"}


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
    remembers where it came from (``restart_of``). It writes to its own folder:
    an explicit ``--out`` stays the old run's (``own_output``). Returns (old id,
    new id) pairs.

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
        name = free_name(store, run.get("name"))  # a name is one run's: NAME-2, NAME-3...
        config = own_output(run["config"])
        config = {**config, "name": name} if "name" in config else config
        new_id = store.add_run(config, name=name, after=after,
                               priority=run.get("priority") or 0, notify=run.get("notify"),
                               restart_of=run["id"])
        why = (run.get("exit_reason") or "").splitlines()[0] if run.get("exit_reason") else ""
        moved = (f"; its own output folder, not run {run['id']}'s --out "
                 f"{run['config']['out']}" if run["config"].get("out") else "")
        store.add_event(new_id, "restart", f"restarted from run {run['id']} ({run['status']}"
                        + (f": {why}" if why else "") + ")" + after_text + moved,
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

