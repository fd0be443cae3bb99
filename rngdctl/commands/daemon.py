"""The daemon loop and the gates it evaluates."""

from __future__ import annotations

import sys

import click

from rngdctl.options import echo_json, fmt, json_option, k8s_options, with_home


def _build(home, launcher_name: str | None, store, config):
    from daemon.launchers.factory import make_launcher
    from daemon.run.ingest import Ingest

    name = launcher_name or config.daemon.launcher
    return make_launcher(name, home=home, store=store, config=config, ingest=Ingest(store))


def _k8s_overrides(config, **flags):
    """Flags given on the command line win over config.toml's [k8s] values."""
    for key, value in flags.items():
        if value is not None:
            setattr(config.k8s, key, value)
    return config


def _note_writer(config):
    """The notifier's note: the run's experiment note, written under runs/<id>/ at its end."""

    def write(store, run_id: int, folder):
        from rngdctl.export import write_note

        if not store.step_counts(run_id):
            return None  # export refuses a run with no step: the notifier is told of none
        return write_note(store, [run_id], folder, k8s=config.k8s)

    return write


def _tracker_note(config):
    """The note a tracker attaches at a run's end: its name and markdown, written nowhere."""

    def note(store, run_id: int):
        from rngdctl.export import note_text

        return note_text(store, run_id, k8s=config.k8s)

    return note


@click.command()
@click.option("--launcher", type=click.Choice(["local", "k8s"]),
              help="Where runs go (default: config.toml's [daemon] launcher, else local).")
@click.option("--tick", type=click.FloatRange(min=0.05), help="Seconds between ticks.")
@click.option("--exit-when-idle", is_flag=True,
              help="Exit 0 once the queue is empty and nothing runs.")
@k8s_options
@with_home
def daemon(home, launcher, tick, exit_when_idle, **k8s_flags):
    """Run the loop: probe, gate, launch one run at a time, follow and ingest it.

    With the k8s launcher and [k8s] agents = true: up to [k8s] runs_per_node runs
    on each node (default 1), nodes in parallel; submit --node pins a run.

    Example: rngdctl daemon --launcher local --tick 2 --exit-when-idle
    """
    import logging  # here, not at the top: `holders` and `gates` load this module too

    from daemon.scheduling.loop import Daemon, install_signal_handlers

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    home.ensure()
    config = home.config()
    if tick is not None:
        config.daemon.tick = tick
    _k8s_overrides(config, **k8s_flags)
    with home.store() as store:
        runner = _build(home, launcher, store, config)
        loop = Daemon(home, store, config, runner, exit_when_idle=exit_when_idle,
                      leader=_elector(runner, config), write_note=_note_writer(config),
                      tracker_note=_tracker_note(config))
        install_signal_handlers(loop)
        loop.run()


def _elector(launcher, config):
    """``[k8s] leader_election``: the Lease that lets one replica of several launch."""
    from daemon.errors import ConfigError

    k8s = config.k8s
    if not k8s.leader_election:
        return None
    if launcher.name != "k8s":
        raise ConfigError("[k8s] leader_election needs the k8s launcher (--launcher k8s): "
                          "local daemons on one home already exclude each other by its lock")
    from daemon.launchers.k8s import leader

    return leader.LeaderElector(launcher.client, namespace=k8s.namespace, name=k8s.lease_name,
                                identity=leader.identity(), lease_duration=k8s.lease_duration,
                                renew_deadline=k8s.renew_deadline)


def read_gates(home, launcher_name: str | None, cards: int | None, **k8s_flags) -> dict:
    """Read the probes now and evaluate every gate for the head of the queue."""
    from daemon.gates import rules
    from daemon.probes import smi
    from daemon.probes.host_reading import read_host
    from daemon.scheduling import liveness, replicas

    cards_pending = smi.Pending()  # furiosa-smi's child reads while the rest is probed
    config = _k8s_overrides(home.config(), **k8s_flags)
    with home.store() as store:
        head = store.head_of_queue()
        need = cards or (int(head["config"]["cards"]) if head else 1)
        launcher = _build(home, launcher_name, store, config)
        host = read_host(tuple(config.gates.device_globs))
        try:
            cluster = launcher.cluster_reading(head or {"id": None, "config": {"cards": need}})
        finally:
            launcher.close()
        result = rules.evaluate(host=host, cluster=cluster, cards=need,
                                active=store.active_runs(), load_max=config.gates.load_max,
                                card_reading=cards_pending.result(),
                                max_temp_c=config.gates.max_temp_c)
        live = liveness.for_home(home, store)
        leads = replicas.for_home(home, store)
    return {
        "run": head["id"] if head else None,
        "cards": need,
        "passed": rules.all_pass(result),
        "gates": [g.as_dict() for g in result],
        "holders": [h.as_dict() for h in host.holders],
        "visibility": host.visibility_note,
        "daemon": live.as_dict(),
        "daemon_summary": live.summary(),
        "replicas": leads.as_dict(),
    }


@click.command()
@click.option("--launcher", type=click.Choice(["local", "k8s"]), help="Launcher to ask.")
@click.option("--cards", type=click.IntRange(min=1),
              help="Cards to check for (default: the head of the queue's, else 1).")
@k8s_options
@json_option
@with_home
def gates(home, launcher, cards, as_json, **k8s_flags):
    """Read the probes now and print each gate's reading, threshold and verdict.

    Exits 0 when every gate passes and 1 when one blocks (scripts rely on it),
    with or without --json. The verdicts are read now, not stored; when no
    daemon runs, a last line says so: nothing launches until one starts.

    Example: rngdctl gates --json
    """
    reading = read_gates(home, launcher, cards, **k8s_flags)
    if as_json:
        echo_json(reading)
    else:
        _print_gates(reading)
    if not reading["passed"]:
        click.get_current_context().exit(1)


def _print_gates(reading: dict) -> None:
    who = f"run {reading['run']}" if reading["run"] else "no queued run"
    click.echo(f"gates for {who}, {reading['cards']} card(s): "
               + ("all pass" if reading["passed"] else "BLOCKED"))
    glyph = {"pass": "✓", "fail": "✗", "n/a": "–"}
    for g in reading["gates"]:
        first, *more = g["detail"].split("\n")  # the nodes gate: one line per node
        click.echo(f"  {glyph[g['verdict']]} {g['name']:<14} {fmt(g['reading'])!s:>8}  "
                   f"{g['threshold']:<12} {first}")
        for line in more:
            click.echo(f"{'':>42}{line}")
    click.echo(f"  ({reading['visibility']})")
    if reading["replicas"]["text"]:
        click.echo(f"  {reading['replicas']['text']}")
    if reading["daemon_summary"]:
        click.echo(f"  {reading['daemon_summary']}: nothing launches until a daemon starts")
