"""The daemon's card readings (issue 27): furiosa-smi every ``[daemon] card_sample_s``, each
card's reading stored with the run that holds it, the newest kept for the card-health gate.

Which run holds a card comes from the holder scan of the same tick: a holder
row's run (the pod's label, Kubernetes) or a process of the local launcher's
run. Without node agents the cards read are this host's (daemon/probes/smi.py, in a
child process); with agents each node's agent reads its own and publishes them
in its ConfigMap, and the daemon stores a node's cards once per new heartbeat.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass

from daemon.probes import smi

log = logging.getLogger("rngdctl.daemon")

#: After a reading that hung or crashed, or found no card, the next try waits at least
#: this long: a hung binding costs a tick its timeout, not every other tick, and a host
#: without cards is not asked every 10 s for what does not change.
FAILED_BACKOFF = 60.0
#: A reading older than this many sampling periods is too old for the gate.
STALE_PERIODS = 3


@dataclass(frozen=True)
class Latest:
    """The newest reading the gate may use, and when it was taken."""

    reading: smi.CardsReading
    time: float


def holding_runs(rows, active: list[dict], own_pids=frozenset(),
                 home: str | None = None) -> dict[str, int]:
    """card name -> the run of ours (of the home ``home``) holding it, from the holder
    report's rows."""
    ids = {r["id"] for r in active}
    held: dict[str, int] = {}
    for row in rows:
        run = row.run if row.ours(ids, home) else None
        if run is None and row.pid is not None and row.pid in own_pids and len(active) == 1:
            run = active[0]["id"]  # the local launcher: its trainer's processes
        if run is not None:
            for card in row.cards:
                held[card] = run
    return held


def sample_row(card: dict, *, run_id: int | None, node: str | None) -> dict:
    """A card's reading as the store keeps it."""
    cores = card.get("cores_occupied")
    return {**{k: card.get(k) for k in (
        "card", "uuid", "alive", "temp_c", "ambient_c", "power_w", "power_limit_w", "util",
        "memory_used", "memory_total", "throttle")},
        "run_id": run_id, "node": node,
        "cores_occupied": len(cores) if isinstance(cores, list) else None,
        "throttled": bool(smi.throttled(card))}


class CardSampler:
    """Called every tick; reads and stores the cards once per ``every`` seconds."""

    def __init__(self, store, *, every: float, reader=None, node: str | None = None):
        self.store = store
        self.every = every
        self.reader = reader or smi.CardReader()
        self.node = node
        self.latest: Latest | None = None
        self._next = 0.0
        self._heartbeats: dict[str, float] = {}  # node -> the agent reading stored last

    def due(self, now: float) -> bool:
        return now >= self._next

    def sample(self, now: float, rows, active: list[dict], own_pids=frozenset()) -> None:
        """This host's cards now, stored with the runs that hold them."""
        reading = self.reader.read()
        self.latest = Latest(reading, now)
        empty = reading.failed or not reading.cards
        self._next = now + (max(self.every, FAILED_BACKOFF) if empty else self.every)
        if reading.failed:
            log.warning("card reading: %s", reading.why)
        held = holding_runs(rows, active, own_pids, self.store.home_id)
        self._store([sample_row(c, run_id=held.get(c["card"]), node=self.node)
                     for c in reading.cards], now)

    def sample_agents(self, now: float, agents, active: list[dict]) -> None:
        """Each agent's cards, once per new heartbeat, with the runs its holder rows name."""
        self._next = now + self.every
        rows = []
        for agent in agents:
            if not agent.cards or self._heartbeats.get(agent.node, -1.0) >= agent.heartbeat:
                continue
            self._heartbeats[agent.node] = agent.heartbeat
            held = holding_runs(agent.holders, active, home=self.store.home_id)
            rows += [sample_row(c, run_id=held.get(c.get("card")), node=agent.node)
                     for c in agent.cards]
        self._store(rows, now)

    def _store(self, rows: list[dict], now: float) -> None:
        if not rows:
            return
        try:
            self.store.add_card_samples(rows, now=now)
        except sqlite3.Error as exc:  # a lost reading must never cost the tick
            log.warning("storing card readings failed: %s", exc)

    def current(self, now: float) -> smi.CardsReading | None:
        """The newest reading while it is fresh enough to gate on, else None."""
        latest = self.latest
        period = self.every if latest and latest.reading.cards else max(self.every,
                                                                          FAILED_BACKOFF)
        if latest is None or now - latest.time > STALE_PERIODS * period:
            return None
        return latest.reading
