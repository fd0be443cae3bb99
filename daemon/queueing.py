"""The queue a researcher drives: dependencies, priorities, edits and clones.

Library functions behind ``submit --after/--priority``, ``edit``, ``clone``
and ``wait``; the click commands are thin over them. SQL stays in
``daemon/store.py``; run configs are validated by ``daemon/runspec.py``.
"""

from __future__ import annotations

from daemon.errors import BadInput
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
