"""The daemon and the host: liveness, daemon-level events, notices, device holders."""

from __future__ import annotations

from daemon.probes import holders as holders_mod
from daemon.scheduling import liveness
from rngdctl.tui.data.reader import Reader
from rngdctl.tui.data.views import DaemonView, EventRow, HolderRow
from rngdctl.tui.notices import NOTIFY, Notice, notice_of

#: Daemon-level events shown in the TUI (`rngdctl events` has them all).
DAEMON_EVENTS = 3


class HostViews(Reader):
    """The daemon bar, its events, the bell's notices and the holders panel."""

    def notices(self) -> tuple[Notice, ...]:
        """The `notify` events stored since the last refresh. The first refresh only notes
        where the events end: what happened before the monitor opened is not news."""
        if self._event_cursor is None:
            self._event_cursor = self.store.last_event_id()
            return ()
        events = self.store.events_after(self._event_cursor, [NOTIFY])
        if events:
            self._event_cursor = events[-1]["id"]
        return tuple(n for n in map(notice_of, events) if n is not None)

    def daemon_events(self, limit: int = DAEMON_EVENTS) -> tuple[EventRow, ...]:
        return tuple(EventRow(e["time"], e["kind"], (e["message"] or "").splitlines()[0]
                              if e["message"] else "")
                     for e in self.store.daemon_events(limit))

    def daemon(self, now: float) -> DaemonView:
        live = liveness.read(self.store.daemon_state(), self.tick, now, home=self.home)
        return DaemonView(
            live.state, pid=live.pid, launcher=live.launcher, node=live.node,
            home=live.home or self.home,
            heartbeat_age=None if live.heartbeat is None else now - live.heartbeat,
            since=live.since, stop_reason=live.stop_reason, pid_gone=live.pid_gone)

    def holders(self, now: float) -> tuple[tuple[HolderRow, ...], float | None]:
        """Device holders in the newest host sample, and that sample's time."""
        sample = self.store.latest_sample()
        if sample is None:
            return (), None
        rows = []
        for h in sample.get("holders") or []:
            row = holders_mod.HolderRow.from_dict(h)
            rows.append(HolderRow(
                pid=row.pid, user=row.user, cmdline=row.command, files=row.files,
                age=row.age(now), cards=row.cards, pod=row.pod, job=row.job, run=row.run,
                mark=row.mark, why=row.orphan,
            ))
        return tuple(rows), sample["time"]
