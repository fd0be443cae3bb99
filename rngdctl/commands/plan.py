"""`rngdctl plan`: every (cards, resident) config the node allows, priced by the step model.

Thin: find the baseline, read what the node allows, call ``daemon.scheduling.plan.make_plan``.
``submit --cards best`` uses ``choose`` from here.
"""

from __future__ import annotations

import click

from rngdctl.options import echo_json, json_option, with_home
from rngdctl.units import rate, secs


def capacity_for(home, config, backend: str, launcher_name: str | None = None):
    """What the node allows, for the launcher in use (config.toml's, or the one named)."""
    from daemon.scheduling import plan

    name = launcher_name or config.daemon.launcher
    if name == "k8s":
        from daemon.launchers.factory import make_launcher
        from daemon.run.ingest import Ingest

        with home.store() as store:
            launcher = make_launcher("k8s", home=home, store=store, config=config,
                                     ingest=Ingest(store))
            try:
                # The pod's memory limit is the host memory a run gets.
                return plan.k8s_capacity(launcher,
                                         host_gb=plan.memory_quantity_gb(config.k8s.memory))
            finally:
                launcher.close()
    from daemon.probes.host_reading import read_host

    host = read_host(tuple(config.gates.device_globs))
    return plan.local_capacity(host, backend=backend, host_gb=plan.host_memory_gb())


def build_plan(home, store, *, baseline_run=None, model=None, steps=None, seq_len=None,
               accum=None, card_gb=None, launcher=None):
    """The plan for a baseline run (id or name) or a model's newest baseline in the store."""
    from daemon.errors import BadInput
    from daemon.run.spec import DEFAULTS
    from daemon.scheduling import plan
    from daemon.scheduling.baselines import find_baseline

    if baseline_run is None and model is None:
        raise BadInput("give --baseline RUN or --model NAME")
    base_id = (store.run(baseline_run)["id"] if baseline_run is not None
               else find_baseline(store, model))
    backend = str(store.run(base_id)["config"].get("backend") or "cpu")
    capacity = capacity_for(home, home.config(), backend, launcher)
    # Submit's defaults, not the baseline's shape: the config `submit` would run is priced,
    # so `plan` and `submit --cards best` agree (each prints what it priced).
    return plan.make_plan(store, base_id, capacity, steps=steps or DEFAULTS["steps"],
                          seq_len=seq_len or DEFAULTS["seq_len"],
                          accum=accum or DEFAULTS["accum"], card_gb=card_gb)


def choose_best(home, store, options: dict):
    """``submit --cards best``: the plan for the submitted model, seq len, accum and steps.

    Returns the plan (its ``best`` is the choice); raises BadInput when nothing fits now.
    """
    from daemon.errors import BadInput
    from daemon.run.spec import validate

    if options.get("resident") is not None:
        raise BadInput("--cards best chooses --resident too: leave --resident out")
    # The submitted config with every default and the model resolved; cards do not matter here.
    config = validate({**options, "cards": 1, "resident": 0})
    result = build_plan(home, store, model=config["model"], steps=config["steps"],
                        seq_len=config["seq_len"], accum=config["accum"])
    if result.best is None:
        raise BadInput(f"--cards best: no config to choose: {result.why}")
    return result


def _gb(row_fits: bool, need: float | None) -> str:
    mark = "fits" if row_fits else "NO"
    return f"{mark} {need:.3g} GB" if need is not None else mark


def format_plan(p) -> str:
    lines = [
        (f"plan for {p.model}: baseline run {p.baseline_run} {p.baseline_pass} "
        f"({p.baseline}, {secs(p.baseline_step_s)})"),
        f"node: {p.capacity.rule}",
        f"{p.priced.words()[0].upper()}{p.priced.words()[1:]}",
        "",
        (f"  {'cards':>5} {'res':>4} {'step':>10} {'tok/s':>9} {f'{p.steps} steps':>11}  "
        f"{'card memory':<16} {'host memory':<16}"),
    ]
    for r in p.rows:
        mark = "*" if r is p.best else " "
        lines.append(
            f"{mark} {r.cards:>5} {r.resident:>4} {secs(r.step_s):>10} {rate(r.tokens_per_s):>9} "
            f"{secs(r.total_s):>11}  {_gb(r.card_fits, r.card_gb):<16} "
            f"{_gb(r.host_fits, r.host_gb):<16}" + ("" if r.free_now else "  (cards busy)"))
    lines.append("")
    if p.best:
        lines.append(f"* {p.best.cards} card{'s' if p.best.cards != 1 else ''} x "
                     f"{p.best.resident} resident: {p.why}")
    else:
        lines.append(f"no config to recommend: {p.why}")
    estimated = sorted({t for r in p.rows for t in r.estimated_terms})
    if estimated:
        lines.append(f"estimated terms (no resident pass measured): {', '.join(estimated)}")
    return "\n".join(line.rstrip() for line in lines)


@click.command()
@click.option("--baseline", "baseline_run",
              help="Run (id or name) whose all-offload pass gives the step model's terms.")
@click.option("--model", help="Use the newest run of this model with an all-offload pass.")
@click.option("--steps", type=click.IntRange(min=1), default=200, show_default=True,
              help="Steps the time column is for.")
@click.option("--seq-len", type=click.IntRange(min=1), help="Sequence length to price "
              "(default 512, submit's; the plan says when it is not the baseline's).")
@click.option("--accum", type=click.IntRange(min=1), help="Accumulation to price (default 4, "
              "submit's).")
@click.option("--card-gb", type=click.FloatRange(min=0, min_open=True),
              help="Card memory for the fit check (default: what the backend fixes).")
@click.option("--launcher", type=click.Choice(["local", "k8s"]),
              help="Whose cards to count (default: config.toml's [daemon] launcher).")
@json_option
@with_home
def plan(home, as_json, baseline_run, model, steps, seq_len, accum, card_gb, launcher):
    """Price every (cards, resident) config the node allows and mark the fastest that fits now.

    Each row: predicted step time, tok/s, time for --steps, and whether the
    config fits in card and host memory (the step model's memory checks).

    Example: rngdctl plan --model tiny-llama --steps 500
    """
    from daemon.errors import BadInput

    with home.store() as store:
        try:
            result = build_plan(home, store, baseline_run=baseline_run, model=model,
                                steps=steps, seq_len=seq_len, accum=accum, card_gb=card_gb,
                                launcher=launcher)
        except BadInput as exc:
            if baseline_run is not None or "no baseline for model" not in str(exc):
                raise
            # Only plan can take another model's run as the baseline.
            raise BadInput(f"{exc}, or price from any run's with --baseline RUN") from None
    if as_json:
        echo_json(result.as_dict())
        return
    click.echo(format_plan(result))
