"""The event log: what happened to a run, or to the daemon (no run)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

from daemon.store.codec import _json, _where
from daemon.store.connection import Connection

#: ``events``' orders: when each happened, or the order the store received them.
EVENT_ORDERS = {"time": "time DESC, id DESC", "stored": "id DESC"}


class Events(Connection):
    """The events table."""

    def add_event(self, run_id: int | None, kind: str, message: str, *,
                  data: dict | None = None, now: float | None = None) -> None:
        # A NaN time would reach the NOT NULL column as NULL and fail the insert.
        when = now if now is not None and math.isfinite(now) else time.time()
        self.conn.execute(
            "INSERT INTO events (time, run_id, kind, message, data) VALUES (?,?,?,?,?)",
            (when, run_id, kind, message, _json(data)),
        )

    def add_event_once(self, run_id: int | None, kind: str, message: str, *,
                       data: dict | None = None, when: float | None = None) -> bool:
        """Store an event from the trainer unless the same one (time, kind, text) is stored."""
        found = self.conn.execute(
            "SELECT 1 FROM events WHERE run_id IS ? AND kind = ? AND message = ? AND "
            "(? IS NULL OR time = ?) LIMIT 1",
            (run_id, kind, message, when, when),
        ).fetchone()
        if found:
            return False
        self.add_event(run_id, kind, message, data=data, now=when)
        return True

    def events(self, *, run_id: int | None = None, kinds: Iterable[str] | None = None,
               since: float | None = None, after_id: int | None = None,
               limit: int | None = None, order: str = "time") -> list[dict]:
        """Events oldest first (the newest ``limit`` when given), daemon-level ones (no
        run) included unless ``run_id`` is given.

        ``order`` "time": by when each happened (a trainer's event is stored a tick
        after its time); "stored": in the order the store received them, with
        ``after_id`` giving only those stored after that one (``events --follow``).
        """
        if order not in EVENT_ORDERS:
            raise ValueError(f"no event order {order!r}: one of {', '.join(EVENT_ORDERS)}")
        where, params = _where(("run_id = ?", run_id), ("time >= ?", since),
                               ("id > ?", after_id))
        if kinds is not None:
            kinds = list(kinds)
            where += (" AND " if where else " WHERE ") + \
                f"kind IN ({','.join('?' * len(kinds))})"
            params += kinds
        sql = f"SELECT * FROM events{where} ORDER BY {EVENT_ORDERS[order]}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return list(reversed(self._rows(sql, params)))

    def daemon_events(self, limit: int = 5) -> list[dict]:
        """The newest daemon-level events (no run: start, stop, tick failures, ...)."""
        return list(reversed(self._rows(
            "SELECT * FROM events WHERE run_id IS NULL ORDER BY id DESC LIMIT ?", (limit,))))

    def last_event_id(self) -> int:
        """The newest event's id (0 when there is none): where a follower starts."""
        return self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]

    def events_after(self, after_id: int, kinds: Iterable[str], limit: int = 100) -> list[dict]:
        """Events of ``kinds`` stored after the event ``after_id``, in the order stored."""
        kinds = list(kinds)
        return self._rows(
            f"SELECT * FROM events WHERE id > ? AND kind IN ({','.join('?' * len(kinds))})"
            " ORDER BY id LIMIT ?", [after_id, *kinds, limit])
