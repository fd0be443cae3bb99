"""Every RNGD node at once: agent readings, cards free, and a verdict per node. No I/O.

Each node's ``rngdctl agent`` publishes one ConfigMap (``rngdctl-agent-<node>``)
with its heartbeat and readings (see docs/design.md, "Node agents"). The
daemon lists, in 3 calls whatever the node count, the nodes, the pods of
every namespace and the agents' ConfigMaps; this module turns them into one
``NodeState`` per node with cards, and gates each node.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from daemon.gates.rules import (
    CARDS_FREE,
    DEVICE_IDLE,
    FAIL,
    HOST_LOAD,
    NA,
    NODES,
    PASS,
    Gate,
    card_health,
    one_at_a_time,
)
from daemon.launchers.k8s import cluster, jobspec
from daemon.probes import smi
from daemon.probes.holders import HolderRow, describe
from daemon.probes.host_reading import Holder, HostReading

#: Gate name: the node's agent has published within SILENT_TICKS of its ticks.
AGENT = "agent"
#: An agent silent for more than this many of its own ticks blocks its node.
SILENT_TICKS = 3
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "rngdctl-agent"
AGENT_LABELS = {jobspec.MANAGED_BY: jobspec.MANAGER, COMPONENT_LABEL: COMPONENT}
#: Holder rows an agent publishes at most (a ConfigMap holds 1 MiB).
MAX_ROWS = 100


#: An agent's ConfigMap is this and its node's name (ConfigMap and Node names are both DNS
#: subdomains, of at most 253 characters).
CONFIGMAP_PREFIX = "rngdctl-agent-"
MAX_CONFIGMAP_NAME = 253


def configmap_name(node: str) -> str:
    """The agent's ConfigMap for ``node``: one name per node name, never two nodes' alike.

    ``rngdctl-agent-<node>`` as it is (a node's name is already a valid ConfigMap name);
    a node name too long for that (over 239 characters) is hashed instead, after a
    double dash, which no node name can begin with. The agents' admission policy
    (deploy/agent-daemonset.yaml) holds each agent to its own node's name.
    """
    name = CONFIGMAP_PREFIX + node
    if len(name) <= MAX_CONFIGMAP_NAME:
        return name
    return f"{CONFIGMAP_PREFIX}-{hashlib.sha256(node.encode()).hexdigest()[:32]}"


def agent_configmap(node: str, namespace: str, reading: dict, *, heartbeat: float,
                    tick: float) -> dict:
    """The object an agent writes: its heartbeat and its readings as JSON."""
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": configmap_name(node), "namespace": namespace,
                     "labels": dict(AGENT_LABELS)},
        "data": {"node": node, "heartbeat": repr(float(heartbeat)), "tick": repr(float(tick)),
                 "reading": json.dumps(reading, ensure_ascii=False, default=str)},
    }


@dataclass(frozen=True)
class AgentReading:
    node: str
    heartbeat: float
    tick: float
    load: tuple[float, float, float] | None
    holders: tuple[HolderRow, ...]
    complete: bool
    visibility: str
    cards: tuple[dict, ...]
    cards_note: str | None
    idle_since: dict
    unreadable: int = 0

    def silent(self, now: float) -> bool:
        return now - self.heartbeat > SILENT_TICKS * self.tick


def parse_agent(cm: dict) -> AgentReading | None:
    """An agent's ConfigMap, or None when it is not one (or not readable)."""
    data = cm.get("data") or {}
    try:
        reading = json.loads(data.get("reading") or "{}")
        heartbeat, tick = float(data["heartbeat"]), float(data["tick"])
        node = str(data["node"])
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(reading, dict):
        return None
    load = reading.get("load")
    return AgentReading(
        node=node, heartbeat=heartbeat, tick=tick,
        load=tuple(load) if isinstance(load, list) and len(load) == 3 else None,
        holders=tuple(HolderRow.from_dict(h) for h in reading.get("holders") or []
                      if isinstance(h, dict)),
        complete=bool(reading.get("complete")),
        visibility=str(reading.get("visibility") or ""),
        cards=tuple(c for c in reading.get("cards") or [] if isinstance(c, dict)),
        cards_note=reading.get("cards_note"),
        idle_since=dict(reading.get("idle_since") or {}),
        unreadable=int(reading.get("unreadable") or 0),
    )


@dataclass(frozen=True)
class NodeState:
    name: str
    node: dict
    cards_free: int
    cards_detail: str
    agent: AgentReading | None


def node_states(nodes: list[dict], pods: list[dict], configmaps: list[dict],
                card_resource: str | None = None) -> list[NodeState]:
    """One state per node that offers cards (of ``card_resource``, ``[k8s] card_resource``,
    when set), in name order. A node whose cards are partitioned is one too, with no cards
    free and the reason."""
    by_node: dict[str, list[dict]] = {}
    for pod in pods:
        name = (pod.get("spec") or {}).get("nodeName")
        if name:
            by_node.setdefault(name, []).append(pod)
    agents: dict[str, AgentReading] = {}
    for cm in configmaps:
        reading = parse_agent(cm)
        if reading is not None and (reading.node not in agents
                                    or reading.heartbeat > agents[reading.node].heartbeat):
            agents[reading.node] = reading
    out = []
    for node in nodes:
        name = (node.get("metadata") or {}).get("name")
        if not name or not (cluster.allocatable_cards(node, card_resource)
                            or cluster.partitions(node)):
            continue
        free, detail = cluster.cards_free(node, by_node.get(name, []), card_resource)
        out.append(NodeState(name, node, free, detail, agents.get(name)))
    return sorted(out, key=lambda s: s.name)


def _clock(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t))


def _agent_gate(state: NodeState, now: float) -> Gate:
    agent = state.agent
    if agent is None:
        return Gate(AGENT, None, f"<= {SILENT_TICKS} ticks", FAIL,
                    f"no agent on {state.name} has published in [k8s] agent_namespace "
                    "(deploy/agent-daemonset.yaml)")
    late = max(0.0, now - agent.heartbeat)
    if agent.silent(now):
        return Gate(AGENT, round(late, 1), f"<= {SILENT_TICKS} ticks", FAIL,
                    f"agent on {state.name} silent since {_clock(agent.heartbeat)}")
    return Gate(AGENT, round(late, 1), f"<= {SILENT_TICKS} ticks", PASS,
                f"agent on {state.name} published {late:.0f} s ago")


def _load_gate(state: NodeState, load_max: float) -> Gate:
    agent = state.agent
    if agent is None or agent.load is None:
        return Gate(HOST_LOAD, None, f"< {load_max:g}", NA, f"no reading from {state.name}")
    load1 = round(agent.load[0], 2)
    return Gate(HOST_LOAD, load1, f"< {load_max:g}", PASS if load1 < load_max else FAIL,
                f"{state.name}: load {load1:g} / {agent.load[1]:.2f} / {agent.load[2]:.2f}")


def _idle_gate(state: NodeState, own_runs: set[int], home: str | None) -> Gate:
    agent = state.agent
    if agent is None:
        return Gate(DEVICE_IDLE, None, "0 holders", NA, f"no reading from {state.name}")
    others = [r for r in foreign_holders(agent, own_runs, home) if r.pid is not None]
    if not others:
        detail = f"{state.name}: no process holds a device file"
    else:
        detail = f"{state.name}: {describe(others[0])}"
        if len(others) > 1:
            detail += f" and {len(others) - 1} more"
    if not agent.complete and agent.visibility:
        detail += f"; {agent.visibility}"
    return Gate(DEVICE_IDLE, len(others), "0 holders", FAIL if others else PASS, detail)


def agent_cards(agent: AgentReading) -> smi.CardsReading:
    """An agent's card reading in the reader's form (daemon/probes/smi.py)."""
    return smi.CardsReading(cards=agent.cards, why=agent.cards_note)


def node_gates(state: NodeState, *, cards: int, load_max: float, active: list[dict],
               now: float, home: str | None, per_node: int = 1,
               max_temp_c: float = 90.0) -> list[Gate]:
    """The gates of one node for a run needing ``cards``: agent, load, holders, card health,
    cards, and room for one more of our runs there (fewer than ``per_node`` active); our
    runs are ``active``, of the home ``home``."""
    own_runs = {r["id"] for r in active}
    agent = state.agent
    return [
        _agent_gate(state, now),
        _load_gate(state, load_max),
        _idle_gate(state, own_runs, home),
        card_health(agent_cards(agent) if agent else None, max_temp_c,
                    agent.holders if agent else (), state.name),
        Gate(CARDS_FREE, state.cards_free, f">= {cards}",
             PASS if state.cards_free >= cards else FAIL, state.cards_detail),
        one_at_a_time(active, state.name, per_node),
    ]


def verdict(state: NodeState, gates: list[Gate]) -> str:
    """"rngd-node-1: 2 cards free, load 12, idle → would launch" or what blocks it."""
    blocking = [g for g in gates if g.blocks]
    if not blocking:
        load = next((g.reading for g in gates if g.name == HOST_LOAD), None)
        load_text = f", load {load:g}" if load is not None else ""
        return (f"{state.name}: {state.cards_free} card{'s' if state.cards_free != 1 else ''} "
                f"free{load_text}, idle → would launch")
    first = blocking[0]
    detail = first.detail.removeprefix(f"{state.name}: ")
    return f"{state.name}: {detail}"


def closest(verdicts: list[tuple[NodeState, list[Gate]]]) -> tuple[NodeState, list[Gate]] | None:
    """The node nearest to launching: fewest blocking gates, then most cards free."""
    if not verdicts:
        return None
    return min(verdicts, key=lambda v: (sum(g.blocks for g in v[1]), -v[0].cards_free,
                                        v[0].name))


def summary_gate(verdicts: list[tuple[NodeState, list[Gate]]], chosen: NodeState) -> Gate:
    """The informational ``nodes`` gate: its reading the node the run would go to (or the
    closest, when none passes), its detail every node's verdict, one line each."""
    would = sum(1 for _, gates in verdicts if not any(g.blocks for g in gates))
    return Gate(NODES, chosen.name, f"{would} of {len(verdicts)} would launch", NA,
                "\n".join(verdict(s, g) for s, g in verdicts))


def foreign_holders(agent: AgentReading, own_runs: set[int],
                    home: str | None) -> tuple[HolderRow, ...]:
    """The agent's holder rows less our own runs' (their pods hold their cards, as they
    should: with ``runs_per_node`` > 1 a node may take another run beside ours); ours
    are of this ``home``: another home's run 1 is not our run 1."""
    return tuple(r for r in agent.holders if not r.ours(own_runs, home))


def agent_host(agent: AgentReading, own_runs: set[int] = frozenset(),
               home: str | None = None) -> HostReading:
    """An agent's reading in the probe's form, so the host gates read it as they read /proc
    (our own runs' holders left out)."""
    rows = tuple(Holder(r.pid, r.user, r.command, r.files, r.started)
                 for r in foreign_holders(agent, own_runs, home) if r.pid is not None)
    return HostReading(time=agent.heartbeat, load=agent.load or (0.0, 0.0, 0.0), holders=rows,
                       complete=agent.complete, unreadable=agent.unreadable)


def choose(verdicts: list[tuple[NodeState, list[Gate]]], *, pinned: str | None,
           image: str) -> tuple[NodeState, list[Gate]] | None:
    """The node to launch on: the pinned one; else, of the nodes where every gate passes,
    the one with the most cards free, ties to the one that lists the image; else the
    closest (what blocks it is what the user is told)."""
    if pinned:
        return next((v for v in verdicts if v[0].name == pinned), None)
    passing = [v for v in verdicts if not any(g.blocks for g in v[1])]
    if passing:
        return max(passing, key=lambda v: (v[0].cards_free,
                                           cluster.image_listed(v[0].node, image), v[0].name))
    return closest(verdicts)
