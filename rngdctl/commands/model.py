"""`rngdctl model`: predict the step time of a config that has not run.

Thin: parse, call ``daemon.stepmodel.model_config``, format.
"""

from __future__ import annotations

import click

from rngdctl.options import echo_json, fmt, json_option, with_home


def _ms(seconds: float) -> str:
    return fmt(seconds * 1000 if seconds is not None else None, ",.1f", " ms")


@click.command()
@click.option("--baseline", "baseline_run", required=True,
              help="Run (id or name) whose all-offload pass gives the terms: its --baseline "
                   "pass, or its main pass when it ran with --resident 0.")
@click.option("--cards", type=click.IntRange(min=1), required=True, help="Cards to predict.")
@click.option("--resident", type=click.IntRange(min=0), required=True,
              help="Resident layers per card to predict.")
@click.option("--seq-len", type=click.IntRange(min=1),
              help="Sequence length (default: the baseline's).")
@click.option("--accum", type=click.IntRange(min=1), help="Accumulation (default: the baseline's).")
@click.option("--card-gb", type=click.FloatRange(min=0, min_open=True),
              help="Card memory for the fit check (default: what the backend fixes; cpu: none).")
@click.option("--resident-from", "resident_run",
              help="Run whose main pass (with resident layers, same hardware) gives the device "
                   "optimizer's cost per layer, instead of the estimate.")
@json_option
@with_home
def model(home, as_json, baseline_run, cards, resident, seq_len, accum, card_gb, resident_run):
    """Predict a config's step time and tok/s from a run's all-offload pass.

    Prints the predicted split by phase beside the baseline's, every term with
    where it came from, and whether the resident layers fit in a card's memory.

    Example: rngdctl model --baseline 12 --cards 2 --resident 1
    """
    from daemon import stepmodel

    with home.store() as store:
        base_id = store.run(baseline_run)["id"]
        res_id = store.run(resident_run)["id"] if resident_run is not None else None
        answer = stepmodel.model_config(store, base_id, cards=cards, resident=resident,
                                        seq_len=seq_len, accum=accum, card_gb=card_gb,
                                        resident_run=res_id)
    if as_json:
        echo_json(answer.as_dict())
        return
    click.echo(format_answer(answer))


def format_answer(answer) -> str:
    from daemon.stepmodel import SPLIT

    p, terms = answer.prediction, answer.prediction.terms
    base = terms.baseline
    lines = [
        f"model: {p.target.describe()}",
        (f"  step {_ms(p.step_s)}   {fmt(p.tokens_per_s, ',.0f')} tok/s"
        f"   (baseline: run {answer.baseline.run_id} {answer.baseline.label}, "
        f"{base.describe()}, {_ms(terms.baseline_median_s)})"),
        "",
        f"  {'phase':<14}{'model':>12}{'baseline':>12}",
    ]
    base_split = _baseline_split(terms)
    for phase in SPLIT:
        lines.append(f"  {phase:<14}{_ms(p.phases[phase]):>12}{_ms(base_split[phase]):>12}")
    lines += ["", "  terms:"]
    for t in terms.all():
        lines.append(f"  {t.name:<19}{_ms(t.seconds):>12} per {t.per}; {t.source}")
    if p.estimated_terms:
        lines.append(f"  estimated: {', '.join(p.estimated_terms)}")
    m = answer.memory
    lines += ["", f"  memory: {m.message}" if m.fits else f"  WOULD NOT FIT: {m.message}"]
    return "\n".join(lines)


def _baseline_split(terms) -> dict:
    from daemon.stepmodel import predict

    return predict(terms, terms.baseline).phases
