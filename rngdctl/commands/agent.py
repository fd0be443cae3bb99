"""rngdctl agent: publish this node's readings for the daemon, through the Kubernetes API."""

from __future__ import annotations

import logging
import signal
import sys

import click

from rngdctl.options import echo_json, with_home


@click.command()
@click.option("--node", envvar="NODE_NAME", required=True,
              help="This node's name (the DaemonSet passes spec.nodeName as $NODE_NAME).")
@click.option("--namespace", help="The agents' namespace (default: config.toml's [k8s] "
                                 "agent_namespace, rngdctl-agents).")
@click.option("--context", help="kubeconfig context (default: in-cluster service account).")
@click.option("--tick", type=click.FloatRange(min=0.5), default=5.0, show_default=True,
              help="Seconds between two readings.")
@click.option("--proc", default="/proc", show_default=True,
              help="The host's /proc (the DaemonSet uses hostPID).")
@click.option("--once", is_flag=True, help="Publish one reading, print it as JSON, exit.")
@with_home
def agent(home, node, namespace, context, tick, proc, once):
    """Read this node's load, device holders (with their pods) and furiosa-smi cards every
    tick, and publish them with a heartbeat in the ConfigMap rngdctl-agent-NODE.

    The daemon (with [k8s] agents = true) reads every node's ConfigMap in one
    list call; an agent silent for more than 3 of its ticks blocks its node.

    Example: rngdctl agent --node rngd-node-1 --namespace ml --once
    """
    from daemon.launchers.k8s.agent import Agent
    from daemon.launchers.k8s.client import K8sClient

    config = home.config()
    if context:
        config.k8s.context = context
    namespace = namespace or config.k8s.agent_namespace
    client, _ = K8sClient.from_config(config.k8s)
    loop = Agent(client, namespace=namespace, node=node, tick=tick, proc=proc,
                 globs=config.gates.device_globs, phantom_after=config.gates.phantom_after)
    try:
        if once:
            written = loop.publish()
            echo_json({"configmap": f"{namespace}/{loop.name}",
                       "data": written.get("data") or {}})
            return
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(name)s %(levelname)s %(message)s")
        signal.signal(signal.SIGTERM, lambda *_: loop.stop("SIGTERM"))
        signal.signal(signal.SIGINT, lambda *_: loop.stop("SIGINT"))
        loop.run()
    finally:
        client.close()
