"""`rngdctl wait RUN...`: block until the runs end; exit 0 if all are done, 1 otherwise,
3 when no daemon runs to end them.

Thin over ``daemon.scheduling.waiting.wait_for_runs``, which polls the store.
"""

from __future__ import annotations

import json
import sys

import click

from rngdctl.options import json_option, with_home

#: Seconds between two progress lines on a terminal.
PROGRESS_EVERY = 60.0


def _line(run: dict) -> str:
    name = f" ({run['name']})" if run.get("name") else ""
    reason = (run.get("exit_reason") or "").splitlines()
    return (f"run {run['id']}{name}: {run['status']}"
            + (f": {reason[0]}" if reason and run["status"] != "done" else ""))


@click.command()
@click.argument("run_refs", metavar="RUN...", nargs=-1, required=True)
@click.option("--timeout", type=click.FloatRange(min=0),
              help="Stop waiting after this many seconds (exit 1, the runs left on stderr).")
@click.option("--interval", type=click.FloatRange(min=0.05), default=2.0, show_default=True,
              help="Seconds between reads of the store.")
@click.option("--no-daemon-ok", is_flag=True,
              help="Wait even when no daemon runs (one may start later); without it, no "
                   "daemon for three ticks (at least 10 s) is exit 3.")
@json_option
@with_home
def wait(home, as_json, run_refs, timeout, interval, no_daemon_ok):
    """Wait until the runs end, one line per run as it ends; exit 0 only if all are done.

    --json prints one JSON object a line (id, name, status, exit_reason). On a
    terminal, a line on stderr every minute says where each run stands. With no
    daemon running it exits 3, saying so (--no-daemon-ok waits anyway).

    Example: rngdctl wait 3 4 --timeout 3600 && rngdctl export 3 4
    """
    from daemon.scheduling import liveness
    from daemon.scheduling.waiting import wait_for_runs

    def report(run: dict) -> None:
        if as_json:
            click.echo(json.dumps({k: run.get(k) for k in ("id", "name", "status", "exit_reason",
                                                             "ended")}, ensure_ascii=False))
        else:
            click.echo(_line(run))

    def say(line: str) -> None:
        click.echo(line, err=True)

    with home.store() as store:
        daemon = None if no_daemon_ok else (lambda: liveness.for_home(home, store))
        ended, pending = wait_for_runs(
            store, run_refs, timeout=timeout, interval=interval, on_end=report, daemon=daemon,
            grace=liveness.stale_after(liveness.tick_of(home)), say=say,
            progress_every=PROGRESS_EVERY if sys.stderr.isatty() else None)
    if pending:
        click.echo(f"stopped waiting after {timeout:g} s: run{'s' if len(pending) > 1 else ''} "
                   f"{', '.join(map(str, pending))} not ended", err=True)
    if pending or any(status != "done" for status in ended.values()):
        raise SystemExit(1)  # main() runs click with standalone_mode=False: Exit would be 0
