"""``rngdctl export``: the experiment note for one or more runs."""

from __future__ import annotations

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
@json_option
@with_home
def export(home, runs, out, update_design, as_json):
    """Write the experiment note for RUN... (ids or names); prints where it is.

    Several runs give one note with a comparison table. The note never
    overwrites an earlier one: a second export of the same runs gets a suffix.
    OUT/STATUS.md (one line per note, newest first) and OUT/events.jsonl (one
    record per export) are kept too; exporting the same runs twice changes
    neither.

    Example: rngdctl export 12 13 --out experiments/
    """
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
