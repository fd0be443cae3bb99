"""Gates: may the head of the queue start now?

Every gate is read in the same tick and evaluated here, without I/O, from
readings the probes and the launcher took. A gate's verdict is ``pass``,
``fail`` or ``n/a`` (not applicable to this launcher; it does not block).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from daemon.probes import smi
from daemon.probes.holders import describe as describe_holder
from daemon.probes.host_reading import HostReading

PASS, FAIL, NA = "pass", "fail", "n/a"

#: Gate names, in the order they are shown.
HOST_LOAD, DEVICE_IDLE, CARD_HEALTH, CARDS_FREE, IMAGE_PRESENT, ONE_AT_A_TIME = (
    "host_load", "device_idle", "card_health", "cards_free", "image_present", "one_at_a_time")
GATE_NAMES = (HOST_LOAD, DEVICE_IDLE, CARD_HEALTH, CARDS_FREE, IMAGE_PRESENT, ONE_AT_A_TIME)
#: With node agents (daemon/gates/nodes.py): an informational gate, never blocking. Its reading
#: is the node the run would go to (the closest, when every node blocks), its detail
#: every node's verdict, one line each.
NODES = "nodes"


def node_verdicts(gates: list[dict]) -> dict:
    """From a stored check: {"node": where the run would go, "nodes": [each node's
    verdict]}; {} without node agents. For ``show`` and the TUI."""
    summary = next((g for g in gates if g.get("name") == NODES), None)
    if summary is None:
        return {}
    return {"node": summary.get("reading"), "nodes": (summary.get("detail") or "").split("\n")}


@dataclass(frozen=True)
class Gate:
    name: str
    reading: object
    threshold: object
    verdict: str
    detail: str = ""

    @property
    def blocks(self) -> bool:
        return self.verdict == FAIL

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ClusterReading:
    """What the launcher knows about cards and the image (None: not applicable)."""

    cards_free: int | None = None
    cards_detail: str = ""
    image_present: bool | None = None
    image_detail: str = ""
    #: With node agents: the launch node's reading (it stands in for this host's probe),
    #: its holder rows, and the gates only agents give (the agent's heartbeat, every
    #: node's verdict).
    host: HostReading | None = None
    holders: tuple = ()
    extra: tuple = ()
    #: With node agents: the node the run would go to, and how many of our runs a node
    #: may hold at once (``[k8s] runs_per_node``). None: one run at a time in all.
    node: str | None = None
    per_node: int = 1
    #: With node agents: the launch node's card reading (daemon/probes/smi.py), from its agent.
    card_reading: smi.CardsReading | None = None


def _host_load(host: HostReading, load_max: float) -> Gate:
    load1 = round(host.load[0], 2)
    ok = load1 < load_max
    return Gate(HOST_LOAD, load1, f"< {load_max:g}", PASS if ok else FAIL,
                f"load {load1:g} / {host.load[1]:.2f} / {host.load[2]:.2f}")


def _device_idle(host: HostReading, own_pids: set[int], rows=()) -> Gate:
    others = [h for h in host.holders if h.pid not in own_pids]
    if others:
        first = others[0]
        row = next((r for r in rows if r.pid == first.pid), None)
        if row is not None and (row.pod or row.orphan):
            detail = describe_holder(row)  # names the pod, or why there is none
        else:
            detail = (f"pid {first.pid} {first.cmdline[:60]} ({first.user}) holds "
                      f"{', '.join(first.files[:3])}")
        if len(others) > 1:
            detail += f" and {len(others) - 1} more"
    else:
        detail = "no process holds a device file"
    if not host.complete:
        detail += f"; {host.visibility_note}"
    return Gate(DEVICE_IDLE, len(others), "0 holders", FAIL if others else PASS, detail)


def card_health(reading: smi.CardsReading | None, max_temp_c: float, rows=(),
                where: str = "") -> Gate:
    """No card that a run could be given is dead, throttling for a thermal or hardware
    reason, or past ``max_temp_c``. Informational (n/a) without a reading: furiosa-smi
    absent, no card, or a reading that failed. A card a pod holds is not counted: the
    device plugin gave it to that pod, so it is not ours to be given."""
    threshold = f"<= {max_temp_c:g} °C"  # and alive, not hardware-throttled (the detail)
    prefix = f"{where}: " if where else ""
    if reading is None:
        return Gate(CARD_HEALTH, None, threshold, NA, f"{prefix}no card reading yet")
    if reading.why or not reading.cards:
        return Gate(CARD_HEALTH, None, threshold, NA,
                    prefix + (reading.why or "furiosa-smi listed no card"))
    held = {card for r in rows if r.pod and not r.orphan for card in r.cards}
    found = smi.health(reading.cards, max_temp_c, skip=held)
    return Gate(CARD_HEALTH, len(found.unhealthy), threshold,
                FAIL if found.unhealthy else PASS, found.detail(where))


def _cards_free(cluster: ClusterReading, cards: int) -> Gate:
    if cluster.cards_free is None:
        return Gate(CARDS_FREE, None, f">= {cards}", NA,
                    cluster.cards_detail or "local launcher: no Kubernetes cards to count")
    ok = cluster.cards_free >= cards
    return Gate(CARDS_FREE, cluster.cards_free, f">= {cards}", PASS if ok else FAIL,
                cluster.cards_detail)


def _image_present(cluster: ClusterReading) -> Gate:
    if cluster.image_present is None:
        return Gate(IMAGE_PRESENT, None, "present", NA,
                    cluster.image_detail or "local launcher: runs the installed trainer")
    return Gate(IMAGE_PRESENT, cluster.image_present, "present",
                PASS if cluster.image_present else FAIL, cluster.image_detail)


def one_at_a_time(active: list[dict], node: str | None = None, per_node: int = 1) -> Gate:
    """Room for one more of our runs: none active (``node`` None), else fewer than
    ``per_node`` on ``node`` (a run whose node is unknown counts as on every node).

    The store's claim enforces the same rule (``Store.claim_for_launch``); this
    gate says it to the user before the claim refuses.
    """
    if node is None:
        if active:
            return Gate(ONE_AT_A_TIME, len(active), "0 active", FAIL,
                        f"run {active[0]['id']} is {active[0]['status']}")
        return Gate(ONE_AT_A_TIME, 0, "0 active", PASS, "no run active")
    here = [r for r in active if r.get("node") in (node, None)]
    limit = max(1, per_node)
    threshold = "0 active" if limit == 1 else f"< {limit} active"
    if len(here) >= limit:
        where = f"on {node}" + (f" ({len(here)} of {limit} per node)" if limit > 1 else "")
        return Gate(ONE_AT_A_TIME, len(here), threshold, FAIL,
                    f"run {here[0]['id']} is {here[0]['status']} {where}")
    return Gate(ONE_AT_A_TIME, len(here), threshold, PASS,
                f"no run of ours on {node}" if not here
                else f"{len(here)} of {limit} runs of ours on {node}")


def evaluate(*, host: HostReading, cluster: ClusterReading, cards: int, active: list[dict],
             load_max: float, own_pids: set[int] = frozenset(), holders=(),
             card_reading: smi.CardsReading | None = None,
             max_temp_c: float = 90.0) -> list[Gate]:
    """Every gate for a run that needs ``cards`` cards, in GATE_NAMES order.

    ``holders``: the holder report's rows (``daemon.probes.holders``), so that the
    device-idle gate names the pod that holds a card. ``card_reading``: this
    host's newest card reading (daemon/probes/card_sampler.py), None before the first.
    """
    where = ""
    if cluster.host is not None:  # the node's agent read it: the daemon may run elsewhere
        host, holders = cluster.host, cluster.holders
        card_reading, where = cluster.card_reading, cluster.node or ""
    return [
        *cluster.extra[:1],
        _host_load(host, load_max),
        _device_idle(host, set(own_pids), holders),
        card_health(card_reading, max_temp_c, holders, where),
        _cards_free(cluster, cards),
        _image_present(cluster),
        one_at_a_time(active, cluster.node, cluster.per_node),
        *cluster.extra[1:],
    ]


def all_pass(gates: list[Gate]) -> bool:
    return not any(g.blocks for g in gates)


def blocking_summary(gates: list[Gate]) -> str:
    """One line naming what blocks, for events and the TUI."""
    blocking = [g for g in gates if g.blocks]
    if not blocking:
        return "all gates pass"
    return "; ".join(f"{g.name}: {g.detail}" for g in blocking)
