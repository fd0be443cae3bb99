"""The host's readings over time: load samples, gate checks, idle card pods, and
compaction's folds of old samples and checks (daemon/store/compaction.py folds; the SQL is here)."""

from __future__ import annotations

import math
import time

from daemon.store.codec import _json, _where
from daemon.store.connection import Connection


class Host(Connection):
    """The samples, gate_checks and idle_pods tables."""

    # === samples =============================================================

    def add_sample(self, *, load: tuple[float, float, float], holders: list[dict],
                   cards_free: int | None = None, run_id: int | None = None,
                   now: float | None = None) -> None:
        self.conn.execute(
            "INSERT INTO samples (time, run_id, load1, load5, load15, holders, holder_count,"
            " cards_free) VALUES (?,?,?,?,?,?,?,?)",
            (time.time() if now is None else now, run_id, *load, _json(holders),
             sum(1 for h in holders if h.get("pid") is not None), cards_free),
        )

    def samples(self, *, run_id: int | None = None, since: float | None = None,
                until: float | None = None) -> list[dict]:
        where, params = _where(("run_id = ?", run_id), ("time >= ?", since),
                               ("time <= ?", until))
        return self._rows(f"SELECT * FROM samples{where} ORDER BY time", params)

    def latest_sample(self) -> dict | None:
        rows = self._rows("SELECT * FROM samples ORDER BY time DESC, id DESC LIMIT 1")
        return rows[0] if rows else None

    def load_series(self, *, since: float) -> list[tuple[float, float]]:
        """``(time, load1)`` of host samples since ``since``, oldest first."""
        return self.conn.execute(
            "SELECT time, load1 FROM samples WHERE time >= ? AND load1 IS NOT NULL ORDER BY time",
            (since,),
        ).fetchall()

    def iter_samples(self, run_id: int):
        """Host samples taken while ``run_id`` ran, oldest first (as ``samples``)."""
        return self._iter_rows("SELECT * FROM samples WHERE run_id = ? ORDER BY time", [run_id])

    def sample_load_range(self, run_id: int) -> tuple[float, float] | None:
        """The lowest and highest 1-minute load sampled while ``run_id`` ran, or None."""
        # A row folded by compaction (n set) keeps its minute's range in load1_min/max.
        low, high = self.conn.execute(
            "SELECT MIN(CASE WHEN n THEN load1_min ELSE load1 END),"
            " MAX(CASE WHEN n THEN load1_max ELSE load1 END) FROM samples WHERE run_id = ?",
            (run_id,)).fetchone()
        return None if low is None else (low, high)

    # === gate checks =========================================================

    def add_gate_check(self, run_id: int | None, gates: list[dict], passed: bool, *,
                       now: float | None = None) -> None:
        self.conn.execute(
            "INSERT INTO gate_checks (time, run_id, passed, gates) VALUES (?,?,?,?)",
            (time.time() if now is None else now, run_id, int(passed), _json(gates)),
        )

    def gate_checks(self, *, run_id: int | None = None, limit: int | None = None) -> list[dict]:
        """Gate checks, oldest first (the newest ``limit`` when given)."""
        sql, params = "SELECT * FROM gate_checks", []
        if run_id is not None:
            sql += " WHERE run_id = ?"
            params.append(run_id)
        # By time: a folded row (compaction) has a newer id than the raw rows after it.
        sql += " ORDER BY time DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return list(reversed(self._rows(sql, params)))

    def blocked_since(self, run_id: int) -> float | None:
        """When the gates began failing for ``run_id`` without a pass since, or None."""
        row = self.conn.execute(
            "SELECT MIN(time) FROM gate_checks WHERE run_id = ? AND passed = 0 AND time > "
            "COALESCE((SELECT MAX(COALESCE(last_time, time)) FROM gate_checks"
            " WHERE run_id = ? AND passed = 1), -1)",
            (run_id, run_id),
        ).fetchone()
        return row[0] if row else None

    # === idle card pods (phantoms) ===========================================

    def idle_pods(self, node: str) -> dict[str, float]:
        """Pod key -> when it was first seen holding cards with no device file open."""
        return dict(self.conn.execute(
            "SELECT pod, since FROM idle_pods WHERE node = ?", (node,)).fetchall())

    def set_idle_pods(self, node: str, idle: dict[str, float]) -> None:
        """Replace ``node``'s memory of idle pods (pods no longer idle are forgotten)."""
        with self._transaction():
            self.conn.execute("DELETE FROM idle_pods WHERE node = ?", (node,))
            self.conn.executemany("INSERT INTO idle_pods (node, pod, since) VALUES (?,?,?)",
                                  [(node, pod, since) for pod, since in idle.items()])

    # === compaction (daemon/store/compaction.py folds; the SQL is here) =============

    def compact_samples(self, before: float, limit: int) -> tuple[int, bool]:
        """Fold raw samples older than ``before`` into per-minute rows, at most ``limit``.

        Returns (raw rows folded, whether more are left). A minute is never split
        between two calls: the batch ends at a minute's start.
        """
        from daemon.store import compaction

        edge = math.floor(before / compaction.MINUTE) * compaction.MINUTE
        with self._transaction():
            rows = self._rows("SELECT * FROM samples WHERE n IS NULL AND time < ?"
                              " ORDER BY time LIMIT ?", [edge, limit + 1])
            more = len(rows) > limit
            if more:
                edge = math.floor(rows[limit]["time"] / compaction.MINUTE) * compaction.MINUTE
                if edge <= rows[0]["time"]:  # more than a batch in one minute: take it whole
                    edge += compaction.MINUTE
                    rows = self._rows("SELECT * FROM samples WHERE n IS NULL AND time < ?"
                                      " ORDER BY time", [edge])
                rows = [r for r in rows if r["time"] < edge]
            if not rows:
                return 0, more
            self.conn.executemany(
                "INSERT INTO samples (time, run_id, load1, load5, load15, holders, holder_count,"
                " cards_free, n, load1_min, load1_max) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                [(f["time"], f["run_id"], f["load1"], f["load5"], f["load15"],
                  _json(f["holders"]), f["holder_count"], f["cards_free"], f["n"],
                  f["load1_min"], f["load1_max"]) for f in compaction.fold_samples(rows)])
            self.conn.execute("DELETE FROM samples WHERE n IS NULL AND time < ?", (edge,))
        return len(rows), more

    def compact_gate_checks(self, before: float, limit: int) -> tuple[int, bool]:
        """Fold raw gate checks older than ``before`` into runs of identical verdicts.

        Returns (raw checks folded, whether more are left).
        """
        from daemon.store import compaction

        edge = before
        with self._transaction():
            rows = self._rows("SELECT * FROM gate_checks WHERE count IS NULL AND time < ?"
                              " ORDER BY time, id LIMIT ?", [edge, limit + 1])
            more = len(rows) > limit
            if more:
                edge = rows[limit]["time"]
                if edge <= rows[0]["time"]:  # more than a batch at one instant: take it whole
                    edge = math.nextafter(edge, math.inf)
                    rows = self._rows("SELECT * FROM gate_checks WHERE count IS NULL"
                                      " AND time < ? ORDER BY time, id", [edge])
                rows = [r for r in rows if r["time"] < edge]
            if not rows:
                return 0, more
            previous = {}
            for run_id in {r["run_id"] for r in rows}:
                last = self._rows(
                    "SELECT * FROM gate_checks WHERE run_id IS ? AND count IS NOT NULL"
                    " AND time < ? ORDER BY time DESC LIMIT 1", [run_id, rows[0]["time"]])
                if last:
                    previous[run_id] = last[0]
            updates, inserts = compaction.fold_checks(rows, previous)
            self.conn.executemany(
                "UPDATE gate_checks SET last_time = ?, count = ?, gates = ?, load_min = ?,"
                " load_max = ? WHERE id = ?",
                [(f["last_time"], f["count"], _json(f["gates"]), f["load_min"], f["load_max"],
                  f["id"]) for f in updates])
            self.conn.executemany(
                "INSERT INTO gate_checks (time, run_id, passed, gates, count, last_time,"
                " load_min, load_max) VALUES (?,?,?,?,?,?,?,?)",
                [(f["time"], f["run_id"], int(f["passed"]), _json(f["gates"]), f["count"],
                  f["last_time"], f["load_min"], f["load_max"]) for f in inserts])
            self.conn.execute("DELETE FROM gate_checks WHERE count IS NULL AND time < ?",
                              (edge,))
        return len(rows), more
