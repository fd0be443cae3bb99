"""`rngdctl edit`, `clone`, `restart` and `resume`: change a queued run; queue runs again.

Thin over ``daemon.scheduling.queueing.edit_run`` / ``clone_run``; the changes are
validated by ``daemon.run.spec`` exactly as ``submit``'s options are.
"""

from __future__ import annotations

import click

from rngdctl.options import echo_json, json_option, with_home

set_option = click.option(
    "--set", "settings", multiple=True, metavar="KEY=VALUE",
    help="A submit option to change (steps=500, seq-len=256, baseline=true; KEY= resets it "
         "to its default). Repeat for several.")


def _changes(changes: dict) -> dict:
    return {k: {"old": old, "new": new} for k, (old, new) in changes.items()}


def _text(changes: dict) -> str:
    return ", ".join(f"{k.replace('_', '-')} {old} -> {new}" for k, (old, new) in changes.items())


@click.command()
@click.argument("run_ref", metavar="RUN")
@set_option
@json_option
@with_home
def edit(home, as_json, run_ref, settings):
    """Change a queued run's config, with the same validation as submit.

    Example: rngdctl edit 7 --set steps=500 --set seq-len=256
    """
    from daemon.run.host_fit import Host
    from daemon.scheduling.queueing import edit_run

    with home.store() as store:
        run, changes = edit_run(store, run_ref, list(settings), host=Host.of(home.config()))
    if as_json:
        echo_json({"id": run["id"], "changes": _changes(changes), "config": run["config"]})
    elif changes:
        click.echo(f"run {run['id']} edited: {_text(changes)}")
    else:
        click.echo(f"run {run['id']}: nothing changed")


@click.command()
@click.argument("run_ref", metavar="RUN")
@set_option
@json_option
@with_home
def clone(home, as_json, run_ref, settings):
    """Queue a copy of any run (its config, name and priority), with changes; prints its id.

    The copy writes to its own folder: the copied run's --out stays that run's
    (--set out=DIR for another folder).

    Example: rngdctl clone 7 --set lr=2e-5
    """
    from daemon.run.host_fit import Host
    from daemon.scheduling.queueing import clone_run

    with home.store() as store:
        new_id, changes = clone_run(store, run_ref, list(settings), host=Host.of(home.config()))
        new = store.run(new_id)
        position = store.queue_position(new_id)
    if as_json:
        echo_json({"id": new_id, "status": new["status"], "position": position,
                   "changes": _changes(changes), "config": new["config"]})
        return
    old_out = changes.get("out", (None, None))[0]
    if old_out and new["config"].get("out") is None:  # stderr: stdout stays the id alone
        click.echo(f"run {new_id} writes to its own folder: --out {old_out} stays run "
                   f"{run_ref}'s (--set out=DIR for another folder)", err=True)
    click.echo(new_id)


@click.command()
@click.argument("run_refs", metavar="[RUN]...", nargs=-1)
@click.option("--all-failed", is_flag=True,
              help="Every failed, oom or timed-out run (and every run cancelled because the "
                   "run it waited for failed) not restarted yet.")
@json_option
@with_home
def restart(home, as_json, run_refs, all_failed):
    """Queue each ended run again, as a new run (the old one and its steps stay).

    Like pueue's restart: the new run copies the config, name, priority and
    notifier; a run that waited for another (--after) waits for that run's
    restart when it has one. It writes to its own folder: an --out stays the
    old run's (`rngdctl resume` goes on in it). Prints one line per run: OLD -> NEW.

    Example: rngdctl restart --all-failed
    """
    from daemon.run.host_fit import Host
    from daemon.scheduling.queueing import restart_runs

    passed_over = []

    def refused(run: dict, why: str) -> None:
        passed_over.append(run["id"])
        click.echo(why, err=True)

    with home.store() as store:
        pairs = restart_runs(store, list(run_refs), all_failed=all_failed,
                             host=Host.of(home.config()), refused=refused)
        outs = {old: store.run(old)["config"].get("out") for old, _ in pairs}
    if as_json:
        echo_json([{"from": old, "id": new} for old, new in pairs])
    elif not pairs:
        click.echo("no run restarted" if passed_over else "no failed run to restart")
    else:
        for old, new in pairs:
            # A restart writes to its own folder: an explicit --out is the old run's.
            mine = f"; its own folder, --out {outs[old]} stays run {old}'s" if outs[old] else ""
            click.echo(f"run {old} -> run {new} (queued{mine})")


@click.command()
@click.argument("run_refs", metavar="RUN...", nargs=-1, required=True)
@json_option
@with_home
def resume(home, as_json, run_refs):
    """Queue each ended run again as itself, to go on from its newest checkpoint.

    The same run id and output folder: the trainer finds the newest complete
    checkpoint there and goes on from it exactly (restart, instead, starts a
    new run from step 1). Steps made again after the checkpoint are stored once.
    Prints one line per run.

    Example: rngdctl resume 3
    """
    from daemon.scheduling.queueing import resume_runs

    with home.store() as store:
        resumed = resume_runs(store, list(run_refs))
    if as_json:
        echo_json([{"id": run_id, "status": "queued", "checkpoint": newest}
                   for run_id, newest in resumed])
        return
    for run_id, newest in resumed:
        where = (f"from {newest.get('path')} (step {newest.get('step')})" if newest
                 else "from the newest checkpoint in its output folder, if any")
        click.echo(f"run {run_id} queued again: goes on {where}")
