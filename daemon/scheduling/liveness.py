"""Is a daemon running on this home, and if not, since when?

The daemon writes a heartbeat into the store every tick and ``stopped`` when it
exits cleanly. A daemon killed with SIGKILL (or a host that lost power) writes
neither, so its row still says "started" with an old heartbeat. Readers
(``runs``, ``show``, ``gates``, the TUI header) call ``read`` and say "no daemon
running since <time>" when the heartbeat is older than ``STALE_TICKS`` ticks or
the pid it recorded is gone, and mark stored state (a run's ``running``, a gate
verdict) as of that time, not as current.

No SQL here: the store's ``daemon_state`` gives the row.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

from daemon.home import DaemonConfig

#: A heartbeat older than this many ticks means no daemon is running.
STALE_TICKS = 3
#: ...but never less than this many seconds: a tick that waits on a slow probe or
#: API call (each has its own timeout) must not read as a dead daemon.
MIN_STALE_S = 10.0

#: The tick assumed when the home's config is not at hand or unreadable.
DEFAULT_TICK = DaemonConfig().tick

ALIVE, DOWN, STOPPED, NEVER = "alive", "down", "stopped", "never"


@dataclass(frozen=True)
class Liveness:
    """``state``: alive; down (killed or hung: no heartbeat lately, or its pid is gone);
    stopped (it exited and said so); never (no daemon ever ran on this home)."""

    state: str
    pid: int | None = None
    launcher: str | None = None
    node: str | None = None
    home: str | None = None
    started: float | None = None
    heartbeat: float | None = None
    stopped: float | None = None
    stop_reason: str | None = None
    pid_gone: bool = False

    @property
    def running(self) -> bool:
        return self.state == ALIVE

    @property
    def since(self) -> float | None:
        """alive: started; down: the last heartbeat; stopped: when it stopped."""
        return {ALIVE: self.started, DOWN: self.heartbeat, STOPPED: self.stopped}.get(self.state)

    @property
    def as_of(self) -> float | None:
        """When stored state was last kept current by a daemon; None while one runs."""
        return None if self.running else self.since

    def as_dict(self) -> dict:
        return {**asdict(self), "running": self.running, "since": self.since,
                "as_of": self.as_of}

    def summary(self, now: float | None = None) -> str | None:
        """One line for a human when no daemon runs; None when one does."""
        now = time.time() if now is None else now
        if self.state == ALIVE:
            return None
        if self.state == NEVER:
            return "no daemon running (none has run on this home)"
        if self.state == STOPPED:
            reason = f": {self.stop_reason}" if self.stop_reason else ""
            return f"no daemon running since {when(self.since)} (it stopped{reason})"
        why = [f"last heartbeat {ago(now - self.heartbeat)} ago" if self.heartbeat else
               "no heartbeat"]
        if self.pid is not None:
            why.append(f"pid {self.pid} is gone" if self.pid_gone else
                       f"pid {self.pid} exists but does not tick")
        return f"no daemon running since {when(self.since)} ({'; '.join(why)})"


def read(row: dict | None, tick: float, now: float | None = None, *,
         home: str | os.PathLike | None = None, pid_alive=None) -> Liveness:
    """The daemon's state from its store row (``Store.daemon_state()``).

    ``tick`` is the configured seconds between ticks. The pid is probed only when
    the row's home is ``home`` (the reader's own, same path): a pid means nothing
    on another machine that reads a copy of the store. ``pid_alive(pid)`` says
    whether a process has that pid (default: a signal-0 probe on this host).
    """
    now = time.time() if now is None else now
    if row is None:
        return Liveness(NEVER)
    common = {k: row.get(k) for k in ("pid", "launcher", "node", "home", "started",
                                      "heartbeat", "stopped", "stop_reason")}
    if row.get("stopped") is not None:
        return Liveness(STOPPED, **common)
    probe = row.get("pid") is not None and _same_path(row.get("home"), home)
    pid_gone = probe and not (pid_alive or _pid_alive)(row["pid"])
    heartbeat = row.get("heartbeat")
    fresh = heartbeat is not None and now - heartbeat <= stale_after(tick)
    if fresh and not pid_gone:
        return Liveness(ALIVE, **common)
    return Liveness(DOWN, pid_gone=pid_gone, **common)


def for_home(home, store, now: float | None = None) -> Liveness:
    """``read`` with the home's configured tick (the default one if config.toml is bad:
    saying whether a daemon runs must not fail on a config error)."""
    # Under leader election the leader may run in another pod on this home's volume:
    # its pid is in another PID namespace, so only its heartbeat tells.
    here = home.path if not leader_elsewhere(store.replicas()) else None
    return read(store.daemon_state(), tick_of(home), now, home=here)


#: A replica's role under leader election (daemon/scheduling/replicas.py reads the rows).
LEADER, STANDBY = "leader", "standby"


def here() -> str:
    """This host's pod name: the first half of a replica's identity (``<pod>/<pid>``).

    ``POD_NAME`` (the downward API, deploy/daemon-deployment.yaml), else the
    hostname, which is the pod's name inside a pod.
    """
    # os.uname's node name is gethostname's, without loading socket (start-up: runs, show).
    return os.environ.get("POD_NAME") or os.uname().nodename


def pod_of(identity: str) -> str:
    return identity.rsplit("/", 1)[0]


def leader_elsewhere(rows: list[dict]) -> bool:
    """Whether a replica row says the leader runs in another pod (another PID namespace)."""
    host = here()
    return any(r["role"] == LEADER and pod_of(r["identity"]) != host for r in rows)


def stale_after(tick: float) -> float:
    """Seconds without a heartbeat after which a daemon (or a replica) counts as gone."""
    return max(STALE_TICKS * tick, MIN_STALE_S)


def tick_of(home) -> float:
    """The home's configured tick; the default one when config.toml is unreadable."""
    from daemon.errors import ConfigError

    try:
        return home.config().daemon.tick
    except ConfigError:
        return DEFAULT_TICK


def _same_path(a, b) -> bool:
    if a is None or b is None:
        return False
    return os.path.realpath(a) == os.path.realpath(b)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # it exists (another user's), or we cannot tell: trust the heartbeat
    return True


def when(t: float | None) -> str:
    if t is None:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def ago(seconds: float) -> str:
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} m"
    return f"{s / 3600:.1f} h"
