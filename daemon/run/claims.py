"""Whether a run may have the ``--out`` it asks for, checked before it is queued.

A run's output folder belongs to that run alone (issues 33 and 36): ``submit``,
``edit``, ``clone`` and ``restart`` refuse, in one line naming the owner, a
folder that another run of this home names (queued, running or past), one
inside another run's or holding one, any folder under ``HOME/runs`` (each run's
own, ``HOME/runs/<id>/model`` its default), and on this host a folder another
run claims (``rngdctl.json``) or that holds files no run claims. The trainer
checks the folder again when it starts (trainer/output/folder.py), as a folder may
change between a submit and a launch; the rules are trainer/ownership.py's.
"""

from __future__ import annotations

from pathlib import Path

from daemon.errors import BadInput
from trainer import ownership

#: The home's folder of run folders (``daemon.home``: beside the store).
RUNS = "runs"


def check_run_output(store, config: dict, *, run_id: int | None = None) -> None:
    """Refuse (BadInput, one line) a config whose ``out`` cannot be this run's folder.

    ``config``: validated by ``daemon.run.spec.validate`` (``out`` absolute); no
    ``out`` is the run's own default folder, always its own. ``run_id``: the
    run being edited (its own folder and claim are its own), None for a new run.
    """
    out = config.get("out")
    if not out:
        return
    home = Path(store.path).parent
    folder = Path(out)
    why = ownership.unusable_output(out, home=home)
    if why is not None:
        raise BadInput(f"--out {out}: {why}")
    runs = home / RUNS
    if folder == runs or runs in folder.parents:
        raise BadInput(f"--out {out} is inside {runs}, where each run's own folder is "
                       f"(HOME/runs/<id>/model is a run's default): give a folder outside it")
    _refuse_another_runs(store, out, run_id)
    if _on_this_host(home):
        _refuse_on_disk(store, folder, run_id)


def _refuse_another_runs(store, out: str, run_id: int | None) -> None:
    others = store.runs_sharing_output(out, exclude=run_id)
    if not others:
        return
    other = others[0]
    named = f"run {other['id']}" + (f" ({other['name']})" if other.get("name") else "")
    if other["out"] == out:
        where = f"is the output folder of {named}"
    elif Path(out) in Path(other["out"]).parents:
        where = f"holds {other['out']}, the output folder of {named}"
    else:
        where = f"is inside {other['out']}, the output folder of {named}"
    raise BadInput(f"--out {out} {where} ({other['status']}): a run's folder is its own "
                   f"(`rngdctl resume {other['id']}` goes on in it); give another folder")


def _refuse_on_disk(store, folder: Path, run_id: int | None) -> None:
    why = ownership.writable_ancestor(folder)
    if why is not None:
        raise BadInput(f"--out {folder}: {why}")
    me = ownership.Owner(None if run_id is None else str(run_id), store.home_id)
    try:
        ownership.check_output(folder, me)
    except ownership.NotOurs as exc:
        raise BadInput(str(exc)) from None


def _on_this_host(home: Path) -> bool:
    """Whether ``--out`` names a folder of this host: with the local launcher. On Kubernetes
    it is the Job's container's path, which only the trainer there can check."""
    from daemon.home import Home

    return Home(home).config().daemon.launcher == "local"
