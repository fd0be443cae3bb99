"""rngdctl holders: who holds which card, with the pod, Job and run behind each process."""

from __future__ import annotations

import time

import click

from rngdctl.commands.daemon import _build, _k8s_overrides
from rngdctl.options import echo_json, json_option, k8s_options, with_home

COLUMNS = ("NODE", "CARD", "PID", "USER", "AGE", "POD", "JOB", "RUN", "MARK", "COMMAND")


def read_holders(home, launcher_name: str | None, proc: str = "/proc", **k8s_flags) -> dict:
    """Probe the device holders now and join them to their pods (one pod list call)."""
    from daemon.probes import holders
    from daemon.probes.host_reading import read_host

    config = _k8s_overrides(home.config(), **k8s_flags)
    now = time.time()
    with home.store() as store:
        launcher = _build(home, launcher_name, store, config)
        host = read_host(tuple(config.gates.device_globs), proc=proc, now=now)
        try:
            found = holders.report(host, launcher, store, now=now, proc=proc,
                                   phantom_after=config.gates.phantom_after)
        finally:
            launcher.close()
    return {
        "time": now,
        "holders": [dict(r.as_dict(), age=r.age(now)) for r in found.rows],
        "orphans": len(found.orphans),
        "phantoms": len(found.phantoms),
        "visibility": host.visibility_note,
    }


def _line(row: dict) -> tuple[str, ...]:
    from rngdctl.tui.data import ago

    dash = "–"
    mark = row["mark"] + (f" ({row['orphan']})" if row["orphan"] else "")
    return (row["node"] or dash, ",".join(row["cards"]) or dash,
            dash if row["pid"] is None else str(row["pid"]), row["user"], ago(row["age"]),
            row["pod"] or (f"? {row['pod_note']}" if row["pod_note"] else dash),
            row["job"] or dash, dash if row["run"] is None else str(row["run"]),
            mark or dash, row["command"][:60])


@click.command()
@click.option("--launcher", type=click.Choice(["local", "k8s"]),
              help="Whose pods to ask (default: config.toml's [daemon] launcher).")
@click.option("--proc", default="/proc", hidden=True, help="The proc folder to read (tests).")
@k8s_options
@json_option
@with_home
def holders(home, launcher, proc, as_json, **k8s_flags):
    """List the processes holding RNGD device files: node, card, pid, user, command,
    pod, Job, run and age, with orphans and phantoms marked.

    An orphan holds a device file from no pod, from a pod that no longer
    exists, or from a pod that requests no cards. A phantom is a pod allocated
    cards whose processes have held no device file for longer than
    [gates] phantom_after seconds.

    Example: rngdctl holders --launcher k8s --json
    """
    found = read_holders(home, launcher, proc, **k8s_flags)
    if as_json:
        echo_json(found)
        return
    rows = [_line(r) for r in found["holders"]]
    if not rows:
        click.echo("no process holds a device file; no phantom pod")
    else:
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
        for line in [COLUMNS, *rows]:
            click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
    click.echo(f"({found['orphans']} orphan(s), {found['phantoms']} phantom(s); "
               f"{found['visibility']})")
