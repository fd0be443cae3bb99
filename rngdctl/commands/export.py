"""``rngdctl export``: the experiment note for one or more runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import click

from rngdctl.options import echo_json, json_option, with_home


@click.command()
@click.argument("runs", nargs=-1, required=True, metavar="RUN...")
@click.option("--out", type=click.Path(file_okay=False), default="experiments",
              show_default=True, help="Folder for the note and its data/ folder.")
@click.option("--update-design", is_flag=True,
              help="Add the runs' step-model rows to docs/design.md (in this folder).")
@click.option("--tensorboard", type=click.Path(file_okay=False), metavar="DIR",
              help="Instead of a note: each run's TensorBoard event files in "
                   "DIR/run-<id>[-<name>]/ (again later: only what is new).")
@click.option("--mlflow", metavar="URI",
              help="Instead of a note: each run to this MLflow tracking server "
                   "(http://host:port), in [trackers] mlflow_experiment.")
@json_option
@with_home
def export(home, runs, out, update_design, tensorboard, mlflow, as_json):
    """Write the experiment note for RUN... (ids or names); prints where it is.

    Several runs give one note with a comparison table. The note never
    overwrites an earlier one: a second export of the same runs gets a suffix.
    OUT/STATUS.md (one line per note, newest first) and OUT/events.jsonl (one
    record per export) are kept too; exporting the same runs twice changes
    neither.

    With --tensorboard or --mlflow the runs go to those trackers instead, each
    point once however often it is exported: steps, held-out losses, the step
    model's error with its interval, the config as hyperparameters, and for an
    ended run its note. The same as [trackers] in config.toml, for runs the
    daemon did not send.

    Example: rngdctl export 12 13 --out experiments/
    """
    if tensorboard is not None or mlflow is not None:
        _send(home, list(runs), tensorboard=tensorboard, mlflow=mlflow, as_json=as_json)
        return
    from rngdctl import export as notes
    from rngdctl.status import record_export

    design = notes.check_design(Path("docs") / "design.md") if update_design else None
    with home.store() as store:
        reports = notes.build(store, list(runs), k8s=home.config().k8s)
        note, data = notes.write_note_reports(reports, Path(out))
        status = record_export(reports, note, Path(out), now=time.time())
        design_rows = notes.update_design(store, reports, design) if design else None
    if as_json:
        echo_json({"note": str(note), "data": str(data), "design_rows": design_rows,
                   "status": status, "runs": [r.as_dict() for r in reports]})
        return
    click.echo(f"note: {note}")
    click.echo(f"data: {data}")
    if design_rows is not None:
        click.echo(f"docs/design.md: {design_rows} step-model row"
                   f"{'s' if design_rows != 1 else ''} added or updated")


def _send(home, refs: list[str], *, tensorboard: str | None, mlflow: str | None,
          as_json: bool) -> None:
    """Send the runs to the trackers asked for, each from where its cursors stand."""
    from daemon.trackers.send import send_all
    from daemon.trackers.targets import sinks
    from rngdctl.export import note_text
    from rngdctl.export.collect import refuse_without_steps

    config = home.config()
    if tensorboard is not None:
        tensorboard = os.path.abspath(os.path.expanduser(tensorboard))
    targets = sinks(tensorboard=tensorboard, mlflow=mlflow,
                    experiment=config.trackers.mlflow_experiment,
                    timeout=config.trackers.timeout, output_mode=config.daemon.output_mode)

    def note(store, run_id: int):
        return note_text(store, run_id, k8s=config.k8s)

    sent = []
    with home.store() as store:
        chosen = {}
        for ref in refs:
            run = store.run(ref)
            refuse_without_steps(store, run)
            chosen.setdefault(run["id"], run)
        for sink in targets:
            for run in chosen.values():
                points = send_all(store, sink, run, note=note)
                sent.append({"tracker": sink.key, "run": run["id"], "points": points,
                             "where": sink.where(store, run)})
    if as_json:
        echo_json({"sent": sent})
        return
    for row in sent:
        click.echo(f"run {row['run']}: {row['points']} new point"
                   f"{'s' if row['points'] != 1 else ''} -> {row['where']}")
