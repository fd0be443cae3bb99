"""Device holders after a launch: until the first step, a process that holds our cards and
is not our pod's deletes the Job (requeued as a transient failure, daemon/launchers/retry.py).

Where the holders are read: without node agents, this host's /proc (the daemon
runs on the one node); with agents, the reading of the agent on the node the
Job's pod landed on, which names each holder's pod (its cgroup, read there).
"""

from __future__ import annotations

from daemon.errors import ConfigError
from daemon.gates import nodes
from daemon.launchers import retry
from daemon.launchers.base import REQUEUE, Outcome
from daemon.launchers.k8s import cluster
from daemon.launchers.k8s.client import K8sRejected, K8sUnavailable
from daemon.probes import cgroups
from daemon.probes.host_reading import Holder, read_host
from daemon.store import FAILED


class HoldersMixin:
    """Part of ``K8sLauncher``: the foreign-holder check and the holder report's pods."""

    def _host(self):
        return read_host(tuple(self.config.gates.device_globs), proc=self.proc)

    def _holder_pids(self, node: str) -> list[int]:
        """The device holders' pids on ``node`` now, before a launch there: this host's, or
        with agents its agent's as the gate check just read it (no API call)."""
        if not self.k8s.agents:
            return sorted(h.pid for h in self._host().holders)
        reading = self._readings.get(node)
        return sorted(r.pid for r in reading.holders if r.pid is not None) if reading else []

    def _check_holders(self, run: dict, name: str, view: cluster.PodView) -> Outcome | None:
        """Until the first step: a device holder that is not our pod's deletes the Job."""
        facts = self.state.run(run["id"])
        if facts.get("checked"):
            return None
        before = set(facts.get("before") or [])
        if self.k8s.agents:
            split = self._split_agent_holders(run, view, before)
            if split is None:  # no reading from the pod's node (yet): look again next tick
                return None
            ours, foreign = split
        else:
            ours, foreign = self._split_holders(self._host().holders, view.uid, before)
            self.state.set_own_pids(run["id"], {h.pid for h in ours})
        if not foreign:
            return None
        first = foreign[0]
        reason = (f"pid {first.pid} ({first.user}: {first.cmdline[:80]}) holds "
                  f"{', '.join(first.files[:3])}, and it is not our pod {view.name}")
        if self.k8s.agents:
            reason += f" (agent on {view.node})"
        why = f"a foreign process held the cards: {reason}"
        verdict = retry.decide(retry.FOREIGN_HOLDER, tries=self._tries(run), limit=self._limit(),
                               evidence="a process not ours held the cards at start")
        outcome = self._end_attempt(run, name, [view.name], Outcome(
            REQUEUE, why, retry=verdict.event(why)) if verdict.retry else Outcome(FAILED, why))
        self.store.add_event(run["id"], "foreign_holder", reason + f"; deleted Job {name}",
                             now=self.clock())
        return outcome

    def _split_holders(self, holders, pod_uid: str | None, before: set[int]):
        """(ours, foreign) of this host's holders: ours when the cgroup names our pod's uid.

        When a holder's cgroup cannot be read (or the pod uid is unknown), a
        holder seen before the launch counts as foreign, any other as ours.
        """
        ours, foreign = [], []
        for holder in holders:
            uid = cgroups.read_pod_uid(holder.pid, self.proc)
            if uid != cgroups.UNREADABLE and pod_uid:
                (ours if uid == pod_uid.lower() else foreign).append(holder)
            else:
                (foreign if holder.pid in before else ours).append(holder)
        return ours, foreign

    def _split_agent_holders(self, run: dict, view: cluster.PodView, before: set[int]):
        """(ours, foreign) of the holders the pod's node's agent read, or None without a
        reading: ours when the agent joined the holder to our pod.

        A holder in another run of ours (``runs_per_node`` > 1) holds its own cards,
        not ours. One the agent could not join to a pod (its cgroup unreadable, the
        API down there) counts, as on this host, by whether it held before the launch.
        """
        reading = self._agent_reading(view.node)
        if reading is None:
            return None
        mine = f"{self.ns}/{view.name}"
        others = {r["id"] for r in self.store.active_runs()} - {run["id"]}
        ours, foreign = [], []
        for row in reading.holders:
            if row.pid is None:  # a phantom pod: no process
                continue
            held = Holder(row.pid, row.user, row.command, tuple(row.files), row.started)
            if row.pod == mine:
                ours.append(held)
            elif row.pod is None and row.pod_note and not row.orphan:
                (foreign if row.pid in before else ours).append(held)
            elif not row.ours(others, self.home_id):
                foreign.append(held)
        return ours, foreign

    def _agent_reading(self, node: str | None) -> nodes.AgentReading | None:
        """``node``'s agent reading: the tick's look listed them (1 call for every run
        checked), else one list call here."""
        if not node:
            return None
        configmaps = self._shared.get("agents")
        if configmaps is None:
            configmaps = self._list_agents()
        readings = [r for r in map(nodes.parse_agent, configmaps)
                    if r is not None and r.node == node]
        return max(readings, key=lambda r: r.heartbeat) if readings else None

    def node_pods(self) -> tuple[str | None, list[dict] | None, str | None]:
        """The node and the pods bound to it (1 API call), for the holder report.

        (node, None, why) when the API does not answer or the node is unknown.
        With agents and no ``[k8s] node`` the daemon is on no particular node: no call
        (each node's holders are in its agent's reading).
        """
        if self.k8s.agents and not self._node:
            return None, None, "node agents: each node's holders are in its agent's reading"
        try:
            node = self.node()
            return node, self.client.pods_on_node(node), None
        except K8sUnavailable as exc:
            self._down(None, exc)
            return self._node, None, f"Kubernetes API unavailable: {exc}"
        except (K8sRejected, ConfigError) as exc:
            return self._node, None, f"cannot list the node's pods: {exc}"
