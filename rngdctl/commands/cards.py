"""rngdctl cards: this host's RNGD cards from furiosa-smi, with who holds each one."""

from __future__ import annotations

import os
import time

import click

from rngdctl.options import echo_json, json_option, k8s_options, with_home

COLUMNS = ("CARD", "ALIVE", "TEMP", "AMBIENT", "POWER", "UTIL", "MEMORY", "CORES", "THROTTLE",
           "HEALTH", "PID", "POD", "RUN")
#: Per-core counters stay out of the printed reading: they only serve the next one.
_INTERNAL = ("counters",)


def _local_holders(config, proc: str) -> dict:
    """The holder scan without Kubernetes: /proc alone, no launcher and no store (what the
    local launcher's report gives, and quicker to start)."""
    from daemon.probes import holders
    from daemon.probes.host_reading import read_host

    now = time.time()
    host = read_host(tuple(config.gates.device_globs), proc=proc, now=now)
    # uname's node name is what socket.gethostname() returns, without socket's import.
    found = holders.correlate(host, node=os.uname().nodename, pods=None, uids={},
                              idle_since={}, now=now)
    return {"time": now, "holders": [r.as_dict() for r in found.rows]}


def read_cards(home, reader, launcher_name: str | None, proc: str = "/proc",
               **k8s_flags) -> dict:
    """One reading of this host's cards, each with its holders (the holder scan, run while
    furiosa-smi's child process reads)."""
    from daemon.probes import smi

    pending = reader.start()
    config = home.config()
    if (launcher_name or config.daemon.launcher) == "k8s":
        from rngdctl.commands.holders import read_holders

        found = read_holders(home, launcher_name, proc, **k8s_flags)
    else:
        found = _local_holders(config, proc)
    reading = reader.read(pending)
    max_temp_c = config.gates.max_temp_c
    cards = []
    for card in reading.cards:
        holders = [{k: h[k] for k in ("pid", "user", "command", "pod", "job", "run", "mark")}
                   for h in found["holders"] if card["card"] in h["cards"]]
        cards.append({**{k: v for k, v in card.items() if k not in _INTERNAL},
                      "health": smi.problems(card, max_temp_c), "holders": holders})
    return {"time": found["time"], "cards": cards, "why": reading.why,
            "version": reading.version, "driver": reading.driver, "max_temp_c": max_temp_c}


def _line(card: dict) -> tuple[str, ...]:
    from rngdctl import card_units as u

    dash = "–"
    held = card["holders"]
    first = held[0] if held else {}
    more = f" +{len(held) - 1}" if len(held) > 1 else ""
    cores = card.get("cores_occupied")
    return (card["card"], {True: "yes", False: "NO"}.get(card["alive"], dash),
            u.temp(card["temp_c"]), u.temp(card["ambient_c"]),
            u.watts(card["power_w"], card["power_limit_w"]), u.util(card["util"]),
            u.memory(card["memory_used"], card["memory_total"]),
            dash if cores is None else f"{len(cores)}/{card.get('cores') or '?'}",
            u.reasons(card.get("throttle")), "; ".join(card["health"]) or "ok",
            (str(first["pid"]) + more) if first.get("pid") is not None else dash,
            first.get("pod") or dash, dash if first.get("run") is None else f"#{first['run']}")


def _print(found: dict, watching: bool) -> None:
    if watching:
        click.echo(time.strftime("%H:%M:%S", time.localtime(found["time"])))
    if not found["cards"]:
        click.echo(found["why"])
        return
    rows = [_line(c) for c in found["cards"]]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    for line in [COLUMNS, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
    errors = [f"{c['card']} {key}: {why}" for c in found["cards"]
              for key, why in (c.get("errors") or {}).items()]
    for error in errors:
        click.echo(f"! {error}")
    first = not any(c["util"] is not None for c in found["cards"])
    click.echo(f"(furiosa-smi {found['version']}, driver {found['driver'] or '?'}; "
               f"health: alive, no thermal/hw throttle, <= {found['max_temp_c']:g} °C"
               + ("; utilization needs a previous reading: --watch S" if first else
                  "; utilization since the previous reading") + ")")


@click.command()
@click.option("--watch", type=click.FloatRange(min=0.5), metavar="S",
              help="Read again every S seconds until Ctrl-C (utilization from the second).")
@click.option("--launcher", type=click.Choice(["local", "k8s"]),
              help="Whose pods name the holders (default: config.toml's [daemon] launcher).")
@click.option("--proc", default="/proc", hidden=True, help="The proc folder to read (tests).")
@k8s_options
@json_option
@with_home
@click.pass_context
def cards(ctx, home, watch, launcher, proc, as_json, **k8s_flags):
    """List this host's RNGD cards from furiosa-smi: alive, temperature (soc peak and
    ambient), power and its limit, utilization, memory, occupied cores, throttle reasons
    and health, with the process, pod and run holding each card.

    Exit 0 with cards, 1 with none (the line says why: furiosa-smi not installed, no
    card, or the binding hung or crashed). --json: {"cards": [...], "why": null | "..."};
    with --watch, one such object a line.

    Example: rngdctl cards --watch 5
    """
    import json

    from daemon.probes.smi import CardReader

    reader = CardReader()
    code = 1
    try:
        while True:
            found = read_cards(home, reader, launcher, proc, **k8s_flags)
            code = 0 if found["cards"] else 1
            if as_json and watch:
                click.echo(json.dumps(found, ensure_ascii=False, default=str))
            elif as_json:
                echo_json(found)
            else:
                _print(found, watching=bool(watch))
            if not watch:
                break
            time.sleep(watch)
            if not as_json:
                click.echo("")
    except KeyboardInterrupt:
        pass
    ctx.exit(code)
