"""``rngdctl agent``: one node's readings, published through the Kubernetes API.

Each tick the agent reads the host load, the ``/dev/rngd*`` holders joined to
their pods (one list call for the pods bound to its node) and, where
furiosa-smi's binding is installed, each card's readings (daemon/probes/smi.py: alive,
temperature, power, utilization since the last tick, memory, throttling); then it
writes them with a heartbeat into its ConfigMap ``rngdctl-agent-<node>``
(one patch, or a create the first time) in the agents' own namespace (``[k8s]
agent_namespace``: privileged, apart from the Jobs'). No port and no protocol of our
own: the daemon lists the ConfigMaps. The memory of idle card pods (phantoms)
travels in the ConfigMap, so a restarted agent keeps it.

Its rights are create and patch of ConfigMaps there, and deploy/agent-daemonset.yaml's
admission policy holds each agent to its own node's ConfigMap (its token names its
node); it needs no get: an empty patch answers with the ConfigMap as it is.
"""

from __future__ import annotations

import logging
import threading
import time

from daemon.gates import nodes
from daemon.launchers.k8s.client import K8sClient, K8sError
from daemon.probes import cgroups, holders, smi
from daemon.probes.host_reading import read_host

log = logging.getLogger("rngdctl.agent")


class Agent:
    def __init__(self, client: K8sClient, *, namespace: str, node: str, tick: float = 5.0,
                 proc: str = "/proc", globs=("/dev/rngd*", "/dev/rngd/*"),
                 phantom_after: float = holders.PHANTOM_AFTER, read_cards=None,
                 clock=time.time):
        self.client = client
        self.namespace = namespace
        self.node = node
        self.tick_s = tick
        self.proc = proc
        self.globs = tuple(globs)
        self.phantom_after = phantom_after
        # A reader of its own keeps the counters that make each tick's utilization.
        self.read_cards = read_cards or smi.CardReader()
        self.clock = clock
        self.name = nodes.configmap_name(node)
        self._idle: dict[str, float] | None = None  # None: not yet read back from the API
        self._stop = threading.Event()

    def reading(self, now: float) -> dict:
        """What this node publishes now (plain JSON data)."""
        host = read_host(self.globs, proc=self.proc, now=now)
        note = None
        try:
            pods = self.client.pods_on_node(self.node)
        except K8sError as exc:
            pods, note = None, f"cannot list the node's pods: {exc}"
        uids = cgroups.pod_uids([h.pid for h in host.holders], self.proc) if pods is not None else {}
        found = holders.correlate(host, node=self.node, pods=pods, uids=uids,
                                  idle_since=self._idle or {}, now=now,
                                  phantom_after=self.phantom_after, api_note=note)
        self._idle = found.idle_since
        cards, cards_note = self.read_cards()
        return {
            "v": 1, "time": now, "load": list(host.load), "complete": host.complete,
            "unreadable": host.unreadable,
            "visibility": host.visibility_note,
            "holders": [r.as_dict() for r in found.rows[:nodes.MAX_ROWS]],
            "cards": cards, "cards_note": cards_note, "idle_since": found.idle_since,
        }

    def _restore(self) -> None:
        """Read the idle-pod memory back from our ConfigMap (once, after a restart): an
        empty merge patch, which answers with it as it is (None: there is none yet)."""
        if self._idle is not None:
            return
        mine = self.client.patch_configmap(self.namespace, self.name, {})
        agent = nodes.parse_agent(mine) if mine else None
        self._idle = dict(agent.idle_since) if agent else {}

    def publish(self, now: float | None = None) -> dict:
        """Read and publish once; returns the ConfigMap written. Raises K8sError."""
        now = self.clock() if now is None else now
        self._restore()
        body = nodes.agent_configmap(self.node, self.namespace, self.reading(now),
                                     heartbeat=now, tick=self.tick_s)
        written = self.client.patch_configmap(self.namespace, self.name,
                                              {"metadata": {"labels": body["metadata"]["labels"]},
                                               "data": body["data"]})
        if written is None:
            written = self.client.create_configmap(self.namespace, body)
        return written

    def stop(self, reason: str = "stopped") -> None:
        log.info("agent stopping: %s", reason)
        self._stop.set()

    def run(self) -> None:
        """Publish every tick until stopped; an API failure is logged and retried next tick."""
        while not self._stop.is_set():
            try:
                self.publish()
            except K8sError as exc:
                log.warning("publishing %s/%s failed: %s", self.namespace, self.name, exc)
            self._stop.wait(self.tick_s)
