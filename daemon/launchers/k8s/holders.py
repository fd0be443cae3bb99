"""Device holders after a launch: until the first step, a process that holds our cards and
is not our pod's deletes the Job (requeued as a transient failure, daemon/retry.py)."""

from __future__ import annotations

from daemon import cgroups, retry
from daemon.errors import ConfigError
from daemon.k8s import cluster
from daemon.k8s.client import K8sRejected, K8sUnavailable
from daemon.launchers.base import REQUEUE, Outcome
from daemon.probes import read_host
from daemon.store import FAILED


class HoldersMixin:
    """Part of ``K8sLauncher``: the foreign-holder check and the holder report's pods."""

    def _host(self):
        return read_host(tuple(self.config.gates.device_globs), proc=self.proc)

    def _check_holders(self, run: dict, name: str, view: cluster.PodView) -> Outcome | None:
        """Until the first step: a device holder that is not our pod's deletes the Job."""
        facts = self.state.run(run["id"])
        if facts.get("checked"):
            return None
        ours, foreign = self._split_holders(self._host().holders, view.uid,
                                            set(facts.get("before") or []))
        self.state.set_own_pids(run["id"], {h.pid for h in ours})
        if not foreign:
            return None
        first = foreign[0]
        reason = (f"pid {first.pid} ({first.user}: {first.cmdline[:80]}) holds "
                  f"{', '.join(first.files[:3])}, and it is not our pod {view.name}")
        why = f"a foreign process held the cards: {reason}"
        verdict = retry.decide(retry.FOREIGN_HOLDER, tries=self._tries(run), limit=self._limit(),
                               evidence="a process not ours held the cards at start")
        outcome = self._end_attempt(run, name, [view.name], Outcome(
            REQUEUE, why, retry=verdict.event(why)) if verdict.retry else Outcome(FAILED, why))
        self.store.add_event(run["id"], "foreign_holder", reason + f"; deleted Job {name}",
                             now=self.clock())
        return outcome

    def _split_holders(self, holders, pod_uid: str | None, before: set[int]):
        """(ours, foreign): ours when the cgroup names our pod's uid.

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
