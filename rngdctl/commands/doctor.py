"""``rngdctl doctor``: check the kubeconfig, the API, permissions, node, image and /proc."""

from __future__ import annotations

import sys

import click

from rngdctl.options import echo_json, json_option, with_home


@click.command()
@click.option("--context", help="kubeconfig context (default: config.toml, else current).")
@click.option("--namespace", help="Namespace for Jobs (default: config.toml's [k8s]); with "
                                 "--agent, the agents' (default: [k8s] agent_namespace).")
@click.option("--agent", is_flag=True,
              help="Check what `rngdctl agent` needs instead (run it as the agent's account).")
@json_option
@with_home
def doctor(home, context, namespace, agent, as_json):
    """Check that the k8s launcher can work here; prints ✓ or ✗ per check, with the fix.

    Exits 1 when a check fails.

    Example: rngdctl doctor --context prod --namespace ml
    """
    from daemon.launchers.k8s.doctor import run_checks

    config = home.config()
    if context:
        config.k8s.context = context
    if namespace and agent:
        config.k8s.agent_namespace = namespace
    elif namespace:
        config.k8s.namespace = namespace
    checks = run_checks(config, agent=agent)
    if as_json:
        echo_json([c.as_dict() for c in checks])
    else:
        for c in checks:
            click.echo(f"{'✓' if c.ok else '✗'} {c.name}: {c.detail}")
            if not c.ok and c.fix:
                click.echo(f"    fix: {c.fix}")
    if not all(c.ok for c in checks):
        sys.exit(1)
