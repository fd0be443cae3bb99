"""Every node at once, from the node agents' readings (``[k8s] agents``): a constant number
of list calls per tick, a verdict per node, and the node the head of the queue goes to."""

from __future__ import annotations

from daemon.gates import nodes
from daemon.gates.rules import ClusterReading
from daemon.launchers.k8s import jobspec
from daemon.launchers.k8s.client import K8sRejected, K8sUnavailable


class AgentsMixin:
    """Part of ``K8sLauncher``: the gates with node agents."""

    def node_states(self) -> list[nodes.NodeState]:
        """Every node with cards, its agent's reading and cards free: 3 list calls, fewer
        when the tick's look at the followed runs already made them (following.py)."""
        live = self._shared.pop("live_pods", None)
        configmaps = self._shared.pop("agents", None)
        states = nodes.node_states(
            self.client.list_nodes(),
            self.client.list_live_pods() if live is None else live,
            self._list_agents() if configmaps is None else configmaps,
            self.k8s.card_resource)
        self._shared["agent_readings"] = [state.agent for state in states if state.agent]
        self._listed = {state.name: state.node for state in states}
        self._readings = {state.name: state.agent for state in states if state.agent}
        return states

    @property
    def uses_agents(self) -> bool:
        return bool(self.k8s.agents)

    def agent_readings(self) -> list[nodes.AgentReading]:
        """Every agent's newest reading, for the card samples: what this tick's gate check
        or look listed, else one list call."""
        if "agent_readings" in self._shared:
            return self._shared["agent_readings"]
        configmaps = self._shared.get("agents")
        if configmaps is None:
            configmaps = self._list_agents()
        return [a for a in map(nodes.parse_agent, configmaps) if a is not None]

    def _list_agents(self) -> list[dict]:
        """The agents' ConfigMaps (1 list call), in their own namespace."""
        return self.client.list_configmaps(self.k8s.agent_namespace, nodes.AGENT_LABELS)

    def node_verdicts(self, run: dict) -> list[tuple[nodes.NodeState, list]]:
        """Each node's gates for ``run`` (agent, load, holders, cards, our runs there)."""
        now = self.clock()
        active = self.store.active_runs()
        return [(state, nodes.node_gates(state, cards=int(run["config"]["cards"]),
                                         load_max=self.config.gates.load_max, active=active,
                                         now=now, home=self.home_id,
                                         per_node=self.runs_per_node or 1,
                                         max_temp_c=self.config.gates.max_temp_c))
                for state in self.node_states()]

    def _agents_reading(self, run: dict) -> ClusterReading:
        """Gate every node from its agent; the launch node's reading stands in for /proc.

        The launch node is the run's own (``submit --node``), else ``[k8s] node``;
        else, of the nodes where every gate passes (a node already holding
        ``runs_per_node`` of our runs does not), the one with the most cards free
        (ties: the one listing the image); else the closest one, whose blocking
        gates say why nothing starts. The reading names that node: the scheduler
        claims the run for it, and ``launch`` sends the Job there.
        """
        self._run_id = run.get("id")
        image = self._image(run)
        try:
            verdicts = self.node_verdicts(run)
        except K8sUnavailable as exc:
            self._down(None, exc)
            return ClusterReading(0, f"Kubernetes API unavailable: {exc}", False,
                                  "unknown: the API does not answer")
        except K8sRejected as exc:
            return ClusterReading(0, f"cannot read the nodes: {exc}", False, "unknown")
        self._up(None)
        pinned = self._pinned(run)
        chosen = nodes.choose(verdicts, pinned=pinned, image=image)
        if chosen is None:
            where = pinned or "any node"
            return ClusterReading(0, f"no node with {jobspec.RESOURCE} ({where})", False,
                                  "unknown")
        state, gates = chosen
        present, image_detail = self._image_reading(run, state.node, image)
        agent = state.agent
        ours = {r["id"] for r in self.store.active_runs()}
        return ClusterReading(
            state.cards_free, state.cards_detail, present, image_detail,
            host=nodes.agent_host(agent, ours, self.home_id) if agent else None,
            holders=nodes.foreign_holders(agent, ours, self.home_id) if agent else (),
            extra=(gates[0], nodes.summary_gate(verdicts, state)),
            node=state.name, per_node=self.runs_per_node or 1,
            card_reading=nodes.agent_cards(agent) if agent else None)
