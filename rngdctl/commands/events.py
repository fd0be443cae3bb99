"""rngdctl events: what the daemon did, from the store's events table."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta

import click

from rngdctl.options import json_option, with_home

_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: Seconds between two reads of the store under --follow.
FOLLOW_POLL = 0.5


def parse_since(text: str, now: float) -> float:
    """``--since``: ``10m`` / ``2h`` / ``1d`` ago, ``14:02`` (today, local), a date or
    ``YYYY-MM-DD HH:MM[:SS]`` (local), or seconds since the epoch. ValueError otherwise."""
    text = text.strip()
    match = _AGO.match(text)
    if match:
        return now - float(match.group(1)) * _UNIT[match.group(2)]
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", text):
        clock = datetime.strptime(text if text.count(":") == 2 else text + ":00", "%H:%M:%S")
        today = datetime.fromtimestamp(now)
        moment = today.replace(hour=clock.hour, minute=clock.minute, second=clock.second,
                               microsecond=0)
        if moment.timestamp() > now:  # 23:50 asked at 00:10 means yesterday's
            moment -= timedelta(days=1)
        return moment.timestamp()
    if re.fullmatch(r"\d{9,}(\.\d+)?", text):
        return float(text)
    return datetime.fromisoformat(text).timestamp()


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def event_line(event: dict) -> str:
    """One event as a line: time, run (– for the daemon's own), kind, first line of the text."""
    run = "–" if event["run_id"] is None else f"run {event['run_id']}"
    first = (event["message"] or "").splitlines()[0] if event["message"] else ""
    return f"{_when(event['time'])}  {run:<8} {event['kind']:<18} {first}"


def event_json(event: dict) -> str:
    return json.dumps({"id": event["id"], "time": event["time"], "run": event["run_id"],
                       "kind": event["kind"], "message": event["message"],
                       "data": event.get("data")}, ensure_ascii=False, default=str)


@click.command()
@click.option("--run", "run_ref", metavar="RUN", help="Only this run's events (id or name).")
@click.option("--since", metavar="T",
              help="Only events from T on: 10m, 2h, 1d (ago), 14:02 (today), "
                   "2026-12-01 14:02, or epoch seconds.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events (Ctrl-C stops).")
@json_option
@with_home
def events(home, run_ref, since, follow, as_json):
    """Every stored event, daemon-level ones included, oldest first.

    Daemon start and stop, tick failures, unknown Jobs, gates.consecutive
    raised, requeues, API outages, and each run's own events. --json prints
    one JSON object per line (so --follow --json streams).

    Example: rngdctl events --since 1h --follow
    """
    from daemon.errors import BadInput

    try:
        since_t = parse_since(since, time.time()) if since else None
    except ValueError:
        raise BadInput(f"--since {since!r}: give 10m, 2h, 1d, 14:02, 2026-12-01 14:02 "
                       "or epoch seconds") from None
    show = event_json if as_json else event_line
    with home.store() as store:
        run_id = store.run(run_ref)["id"] if run_ref else None
        last = None
        for event in store.events(run_id=run_id, since=since_t, order="stored"):
            click.echo(show(event))
            last = event["id"]
        if not follow:
            return
        if last is None:
            last = store.last_event_id()
        try:
            while True:
                time.sleep(FOLLOW_POLL)
                for event in store.events(run_id=run_id, since=since_t, after_id=last,
                                          order="stored"):
                    click.echo(show(event))
                    last = event["id"]
        except KeyboardInterrupt:
            return  # Ctrl-C is how a follow ends: not an error
