"""Options and helpers shared by the commands."""

from __future__ import annotations

import functools
import json
import math

import click


def with_home(fn):
    """Adds ``--home DIR`` to a command and passes it a ``Home`` as ``home``.

    The command's own ``--home`` wins over the group's (``rngdctl --home X cmd``),
    which wins over ``RNGDCTL_HOME`` and the default.
    """

    @click.option("--home", "home_path", type=click.Path(file_okay=False), default=None,
                  help="State folder (default: $RNGDCTL_HOME, else the user data folder).")
    @click.pass_context
    @functools.wraps(fn)
    def wrapper(ctx, home_path, **kwargs):
        from daemon.home import Home

        home = Home(home_path) if home_path else (ctx.obj or Home())
        return fn(home=home, **kwargs)

    return wrapper


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def k8s_options(fn):
    """--context, --namespace, --node and --image, for the k8s launcher."""
    for option in reversed([
        click.option("--context", help="kubeconfig context (k8s launcher)."),
        click.option("--namespace", help="Namespace for Jobs (k8s launcher)."),
        click.option("--node", help="The node with the cards (k8s launcher)."),
        click.option("--image", help="Default trainer image (k8s launcher)."),
    ]):
        fn = option(fn)
    return fn


def _clean(value):
    # JSON has no NaN: print it as null so that any JSON reader can load the output.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def echo_json(value) -> None:
    click.echo(json.dumps(_clean(value), indent=2, ensure_ascii=False, default=str))


def fmt(value, spec: str = "", unit: str = "") -> str:
    """A number for a table, or an en dash when it is missing."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:{spec}}{unit}"
