"""What the daemon keeps between ticks: its launchers' facts, its heartbeat, its
replicas under leader election."""

from __future__ import annotations

import json
import time
from typing import Any

from daemon.store.codec import _json
from daemon.store.connection import Connection


class Daemons(Connection):
    """The launcher_state, daemon and replicas tables."""

    # === launcher state ======================================================
    # Facts a launcher carries from tick to tick, keyed by the launcher's own
    # names ("image:<node>:<image>", "run:<id>", ...). Values are JSON.

    def set_launcher_state(self, key: str, value: Any, *, run_id: int | None = None,
                           now: float | None = None) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO launcher_state (key, run_id, value, time) VALUES (?,?,?,?)",
            (key, run_id, _json(value), time.time() if now is None else now),
        )

    def launcher_state(self, key: str) -> Any | None:
        """The value stored under ``key``, or None."""
        row = self.conn.execute("SELECT value FROM launcher_state WHERE key = ?",
                                (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def launcher_states(self, prefix: str) -> dict[str, Any]:
        """Every key starting with ``prefix`` and its value."""
        rows = self.conn.execute(
            "SELECT key, value FROM launcher_state WHERE substr(key, 1, ?) = ? ORDER BY key",
            (len(prefix), prefix),
        ).fetchall()
        return {key: json.loads(value) for key, value in rows}

    def drop_launcher_state(self, key: str | None = None, *, run_id: int | None = None) -> None:
        """Forget one key, or every fact tied to ``run_id``."""
        if key is not None:
            self.conn.execute("DELETE FROM launcher_state WHERE key = ?", (key,))
        if run_id is not None:
            self.conn.execute("DELETE FROM launcher_state WHERE run_id = ?", (run_id,))

    # === the daemon's heartbeat ==============================================

    def daemon_started(self, *, pid: int, launcher: str, home: str, node: str | None = None,
                       now: float | None = None) -> None:
        now = time.time() if now is None else now
        self.conn.execute(
            "INSERT OR REPLACE INTO daemon (id, pid, launcher, node, home, started, heartbeat,"
            " stopped, stop_reason) VALUES (1, ?, ?, ?, ?, ?, ?, NULL, NULL)",
            (pid, launcher, node, home, now, now),
        )

    def daemon_heartbeat(self, *, now: float | None = None) -> None:
        self.conn.execute("UPDATE daemon SET heartbeat = ? WHERE id = 1",
                          (time.time() if now is None else now,))

    def daemon_stopped(self, reason: str, *, now: float | None = None) -> None:
        self.conn.execute("UPDATE daemon SET stopped = ?, stop_reason = ? WHERE id = 1",
                          (time.time() if now is None else now, reason))

    def daemon_state(self) -> dict | None:
        rows = self._rows("SELECT * FROM daemon WHERE id = 1")
        return rows[0] if rows else None

    # === leader election =====================================================
    # One row per daemon replica (its identity: pod name/pid); see daemon/launchers/k8s/leader.py.

    def set_replica(self, identity: str, *, role: str, leader: str | None, pid: int,
                    now: float | None = None) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO replicas (identity, role, leader, pid, heartbeat)"
            " VALUES (?, ?, ?, ?, ?)",
            (identity, role, leader, pid, time.time() if now is None else now))

    def drop_replica(self, identity: str) -> None:
        self.conn.execute("DELETE FROM replicas WHERE identity = ?", (identity,))

    def replicas(self) -> list[dict]:
        return self._rows("SELECT * FROM replicas ORDER BY role, identity")
