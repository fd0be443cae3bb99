"""`rngdctl tui`: the live monitor (textual is imported only when it runs)."""

from __future__ import annotations

import shutil

import click

from rngdctl.options import with_home


@click.command()
@click.option("--read-only", is_flag=True, help="Hide every action: watch only.")
@click.option("--snapshot", is_flag=True,
              help="Print one text frame (at the terminal's size) and exit.")
@click.option("--run", "run_ref", help="Show this run (id or name) instead of the current one.")
@with_home
def tui(home, read_only, snapshot, run_ref):
    """Watch the daemon, the gates, the queue and the current run live.

    Keys: ? help, q quit, / filter, s submit, c cancel, e export, Space pause,
    Tab and 1-5 between panels, l the run's log tail.

    Example: rngdctl tui --read-only
    """
    from rngdctl.tui.app import run_tui, snapshot_text

    if run_ref is not None:
        with home.store() as store:
            run_ref = store.run(run_ref)["id"]  # NoSuchRun: one line, exit 2
    if snapshot:
        size = shutil.get_terminal_size(fallback=(120, 40))
        click.echo(snapshot_text(home, run_ref, read_only=read_only,
                                 size=(size.columns, size.lines)))
        return
    run_tui(home, run_id=run_ref, read_only=read_only)
