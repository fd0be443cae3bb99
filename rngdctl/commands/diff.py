"""`rngdctl diff A B`: only the config values that differ, then step time, tok/s, and the
train and held-out loss.

Thin over ``daemon.run.diff.diff_runs``.
"""

from __future__ import annotations

import click

from rngdctl.options import echo_json, fmt, json_option, with_home
from rngdctl.units import rate, secs


def _name(side) -> str:
    return f"run {side.id}" + (f" ({side.name})" if side.name else "")


def _rel(x: float | None) -> str:
    return f" ({x:+.1%})" if x is not None else ""


def _signed_secs(x: float | None) -> str:
    return "–" if x is None else ("+" if x >= 0 else "-") + secs(abs(x))


def format_diff(d) -> str:
    a, b = d.a, d.b
    lines = [(f"{_name(a)} -> {_name(b)}   ({a.status}, {a.steps_done} steps -> {b.status}, "
             f"{b.steps_done} steps)"), ""]
    if d.config:
        lines.append("config (only what differs):")
        width = max(len(k) for k in d.config) + 2
        lines += [f"  {k:<{width}}{va} -> {vb}" for k, (va, vb) in d.config.items()]
    else:
        lines.append("config: the same")
    lines += [
        "",
        (f"step time (median, steps 6-N)  {secs(a.median_step_s)} -> {secs(b.median_step_s)}   "
        f"{_signed_secs(d.step_s_delta[0])}{_rel(d.step_s_delta[1])}"),
        (f"tok/s                          {rate(a.tokens_per_s)} -> {rate(b.tokens_per_s)}   "
        f"{fmt(d.tokens_per_s_delta[0], '+,.0f')}{_rel(d.tokens_per_s_delta[1])}"),
    ]
    if d.common_step is not None:
        la, lb = d.loss_at_common
        lines.append(f"loss at step {d.common_step} (the last both reached)  "
                     f"{fmt(la, '.4f')} -> {fmt(lb, '.4f')}   {fmt(d.loss_delta, '+.4f')}")
    if d.held_out_step is not None:
        ha, hb = d.held_out_at
        lines.append(f"held-out loss at step {d.held_out_step} (the last both evaluated)  "
                     f"{fmt(ha, '.4f')} -> {fmt(hb, '.4f')}   {fmt(d.held_out_delta, '+.4f')}")
    if d.loss_rows:
        held = any(r.a_held_out is not None or r.b_held_out is not None for r in d.loss_rows)
        lines += ["", f"  {'steps':<12}{f'run {a.id}':>10}{f'run {b.id}':>10}{'delta':>10}"
                  + (f"{f'held-out {a.id}':>14}{f'held-out {b.id}':>14}{'delta':>10}"
                     if held else "")]
        uneven = False
        for r in d.loss_rows:
            mark = "*" if r.a_steps and r.b_steps and r.a_steps != r.b_steps else ""
            uneven = uneven or bool(mark)
            lines.append(f"  {f'{r.first}-{r.last}{mark}':<12}{fmt(r.a, '.4f'):>10}"
                         f"{fmt(r.b, '.4f'):>10}{fmt(r.delta, '+.4f'):>10}"
                         + (f"{fmt(r.a_held_out, '.4f'):>14}{fmt(r.b_held_out, '.4f'):>14}"
                            f"{fmt(r.held_out_delta, '+.4f'):>10}" if held else ""))
        if uneven:
            lines.append("  * the runs reached different steps in this range: the means are "
                         "over different steps")
        if held:
            lines.append("  held-out: each run's newest held-out loss in the range")
    else:
        lines += ["", "no steps to compare"]
    return "\n".join(lines)


@click.command()
@click.argument("a_ref", metavar="A")
@click.argument("b_ref", metavar="B")
@json_option
@with_home
def diff(home, as_json, a_ref, b_ref):
    """Compare two runs: config values that differ, step time, tok/s and loss (B - A).

    Example: rngdctl diff 3 4
    """
    from daemon.run.diff import diff_runs

    with home.store() as store:
        result = diff_runs(store, a_ref, b_ref)
    if as_json:
        echo_json(result.as_dict())
        return
    click.echo(format_diff(result))
