"""Which daemon replica leads, as users and operators see it.

Under leader election (daemon/launchers/k8s/leader.py) each replica writes its row of
the store's ``replicas`` table every tick: its role (leader or standby), the
Lease holder it saw, its pid and its heartbeat. ``read`` turns those rows into
one ``Replicas`` value; ``runs``, ``show``, ``gates`` (text and ``--json``)
and the TUI's replicas bar all print it, so they say the same thing:

    daemon: leader rngdctl-0/1 (this pod) since 10:02:11, standby rngdctl-1/1
    (heartbeat 3 s ago); the standby serves reads and launches nothing until
    the leader's Lease expires

Without leader election (the local launcher, or one k8s daemon) there are no
rows, ``Replicas.elected`` is False and there is no line: whether the one
daemon runs is liveness's to say, as before. No SQL here: the store's
``replicas`` and ``daemon_state`` give the rows.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from daemon.scheduling import liveness
from daemon.scheduling.liveness import LEADER, STANDBY, here, leader_elsewhere, pod_of

__all__ = ["LEADER", "STANDBY", "Replica", "Replicas", "for_home", "here", "leader_elsewhere",
           "pod_of", "read"]


@dataclass(frozen=True)
class Replica:
    """One replica's row as a reader sees it now."""

    identity: str  # <pod>/<pid>
    role: str  # leader | standby
    pid: int | None
    heartbeat: float
    heartbeat_age: float
    live: bool  # its heartbeat is younger than liveness's stale limit
    this_pod: bool  # the reader runs in this replica's pod
    sees: str | None  # the Lease holder this replica last saw

    def label(self) -> str:
        return self.identity + (" (this pod)" if self.this_pod else "")


@dataclass(frozen=True)
class Replicas:
    """``leader``: the live leader, or, while a live standby waits for its Lease to
    expire, the silent one; ``leader_since``: when the live leader took over;
    ``standbys``: the live standbys. ``elected``: leader election is in use."""

    leader: Replica | None = None
    leader_since: float | None = None
    standbys: tuple[Replica, ...] = ()

    @property
    def elected(self) -> bool:
        return self.leader is not None or bool(self.standbys)

    def segments(self) -> list[tuple[str, str]]:
        """The line as (text, kind) pieces, kind in "", leader, standby, silent: the
        TUI styles by kind, the CLI joins the texts. Empty without leader election."""
        if not self.elected:
            return []
        out: list[tuple[str, str]] = [("daemon: ", "")]
        lead = self.leader
        if lead is None:
            out.append(("no leader", "silent"))
        elif lead.live:
            out.append((f"leader {lead.label()}", LEADER))
            if self.leader_since is not None:
                out.append((f" since {_clock(self.leader_since, lead.heartbeat)}", ""))
        else:
            out += [(f"leader {lead.label()} silent", "silent"),
                    (f" (last heartbeat {liveness.ago(lead.heartbeat_age)} ago)", "")]
        for s in self.standbys:
            out += [(", ", ""), (f"standby {s.label()}", STANDBY),
                    (f" (heartbeat {liveness.ago(s.heartbeat_age)} ago)", "")]
        if not self.standbys:
            out.append((", no standby", ""))
        elif lead is not None and lead.live:
            out.append((("; the standby serves reads and launches nothing until the leader's "
                         "Lease expires"), ""))
        else:
            out.append(("; the standby takes over once the Lease is released or expires", ""))
        return out

    def line(self) -> str | None:
        """One line for a human; None without leader election."""
        parts = self.segments()
        return "".join(text for text, _ in parts) if parts else None

    def as_dict(self) -> dict:
        return {"elected": self.elected,
                "leader": asdict(self.leader) if self.leader else None,
                "leader_since": self.leader_since,
                "standbys": [asdict(s) for s in self.standbys],
                "text": self.line()}


def _clock(t: float, ref: float) -> str:
    """A clock time; with the date when ``t`` is not on ``ref``'s day."""
    same_day = time.localtime(t)[:3] == time.localtime(ref)[:3]
    return time.strftime("%H:%M:%S", time.localtime(t)) if same_day else liveness.when(t)


def from_rows(rows: list[dict], daemon_row: dict | None, tick: float,
              now: float | None = None, *, host: str | None = None) -> Replicas:
    """``rows``: ``Store.replicas()``; ``daemon_row``: ``Store.daemon_state()`` (the
    leader writes it when it takes over: its ``started`` is the leader's "since");
    ``tick``: the configured seconds between ticks; ``host``: this pod's name."""
    now = time.time() if now is None else now
    host = here() if host is None else host
    stale = liveness.stale_after(tick)
    seen = [Replica(identity=r["identity"], role=r["role"], pid=r.get("pid"),
                    heartbeat=r["heartbeat"], heartbeat_age=max(0.0, now - r["heartbeat"]),
                    live=now - r["heartbeat"] <= stale,
                    this_pod=pod_of(r["identity"]) == host, sees=r.get("leader"))
            for r in rows]
    standbys = tuple(sorted((r for r in seen if r.role == STANDBY and r.live),
                            key=lambda r: r.identity))
    leaders = sorted((r for r in seen if r.role == LEADER), key=lambda r: r.heartbeat)
    leader = leaders[-1] if leaders else None
    if leader is not None and not leader.live \
            and not any(s.sees == leader.identity for s in standbys):
        # A silent leader is news only while a live standby still sees it hold the Lease
        # (a failover under way); else it is a row a killed pod left, and whether any
        # daemon runs is liveness's to say.
        leader = None
    since = None
    if leader is not None and leader.live and daemon_row is not None \
            and daemon_row.get("stopped") is None and daemon_row.get("pid") == leader.pid:
        since = daemon_row.get("started")
    return Replicas(leader=leader, leader_since=since, standbys=standbys)


def read(store, tick: float, now: float | None = None, *, host: str | None = None) -> Replicas:
    """The replicas of the daemon on this store, now."""
    return from_rows(store.replicas(), store.daemon_state(), tick, now, host=host)


def for_home(home, store, now: float | None = None) -> Replicas:
    """``read`` with the home's configured tick (the default one if config.toml is bad)."""
    return read(store, liveness.tick_of(home), now)
