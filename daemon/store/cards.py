"""Each card's readings over time (issue 27): the daemon's furiosa-smi readings, one row per
card per reading, tagged with the run that held the card, and their compaction
(daemon/store/compaction.py folds; the SQL is here)."""

from __future__ import annotations

import json
import math
import time

from daemon.store.codec import _json, _where
from daemon.store.connection import Connection

#: A card reading's columns, as ``add_card_samples`` takes them.
CARD_COLUMNS = ("run_id", "node", "card", "uuid", "alive", "temp_c", "ambient_c", "power_w",
                "power_limit_w", "util", "memory_used", "memory_total", "cores_occupied",
                "throttle", "throttled")
_FOLDED = ("n", "temp_min", "temp_max", "power_min", "power_max", "util_min", "util_max")


def _value(row: dict, column: str):
    value = row.get(column)
    if column == "throttle":
        return _json(list(value or []))
    if column in ("alive", "throttled") and value is not None:
        return int(value)
    return value


class Cards(Connection):
    """The card_samples table."""

    def add_card_samples(self, rows: list[dict], *, now: float | None = None) -> None:
        """One reading of some cards: each row has ``CARD_COLUMNS`` (missing: NULL)."""
        at = time.time() if now is None else now
        self.conn.executemany(
            f"INSERT INTO card_samples (time, {', '.join(CARD_COLUMNS)}) VALUES "
            f"(?{', ?' * len(CARD_COLUMNS)})",
            [(at, *(_value(r, c) for c in CARD_COLUMNS)) for r in rows])

    def card_samples(self, *, run_id: int | None = None, since: float | None = None,
                     after_id: int | None = None) -> list[dict]:
        """Card readings, oldest first: a run's, those since a time, those after a row id."""
        where, params = _where(("run_id = ?", run_id), ("time >= ?", since), ("id > ?", after_id))
        return self._rows(f"SELECT * FROM card_samples{where} ORDER BY time, id", params)

    def iter_card_samples(self, run_id: int):
        """A run's card readings, oldest first, streamed (export's data folder)."""
        return self._iter_rows("SELECT * FROM card_samples WHERE run_id = ? ORDER BY time, id",
                               [run_id])

    def card_ranges(self, run_id: int) -> list[dict]:
        """Per card a run held: its readings, and the range of its temperature, power and
        utilization; the readings that throttled, when, and every reason seen."""
        # A folded row (n set) keeps its minute's range in *_min/*_max.
        ranges = ", ".join(f"MIN(CASE WHEN n THEN {low} ELSE {col} END) AS {low},"
                           f" MAX(CASE WHEN n THEN {high} ELSE {col} END) AS {high}"
                           for col, low, high in (("temp_c", "temp_min", "temp_max"),
                                                  ("power_w", "power_min", "power_max"),
                                                  ("util", "util_min", "util_max")))
        rows = self._rows(
            f"SELECT node, card, SUM(COALESCE(n, 1)) AS readings, {ranges},"
            " SUM(throttled) AS throttled, MIN(CASE WHEN throttled THEN time END) AS"
            " throttled_from, MAX(CASE WHEN throttled THEN time END) AS throttled_until,"
            " MIN(alive) AS alive FROM card_samples WHERE run_id = ?"
            " GROUP BY node, card ORDER BY node, LENGTH(card), card", [run_id])
        for row in rows:
            reasons = self.conn.execute(
                "SELECT DISTINCT throttle FROM card_samples WHERE run_id = ? AND card = ?"
                " AND node IS ? AND throttled > 0", (run_id, row["card"], row["node"]))
            row["throttle"] = sorted({r for (text,) in reasons for r in _decoded(text)})
        return rows

    # === compaction (daemon/store/compaction.py folds) ==============================

    def compact_card_samples(self, before: float, limit: int) -> tuple[int, bool]:
        """Fold raw card readings older than ``before`` into per-minute rows, at most
        ``limit``; a minute is never split between two calls. Returns (raw rows folded,
        whether more are left)."""
        from daemon.store import compaction

        edge = math.floor(before / compaction.MINUTE) * compaction.MINUTE
        raw = "SELECT * FROM card_samples WHERE n IS NULL AND time < ? ORDER BY time, id"
        with self._transaction():
            rows = self._rows(raw + " LIMIT ?", [edge, limit + 1])
            more = len(rows) > limit
            if more:
                edge = math.floor(rows[limit]["time"] / compaction.MINUTE) * compaction.MINUTE
                if edge <= rows[0]["time"]:  # more than a batch in one minute: take it whole
                    edge += compaction.MINUTE
                    rows = self._rows(raw, [edge])
                rows = [r for r in rows if r["time"] < edge]
            if not rows:
                return 0, more
            columns = ("time", *CARD_COLUMNS, *_FOLDED)
            self.conn.executemany(
                f"INSERT INTO card_samples ({', '.join(columns)}) VALUES "
                f"(?{', ?' * (len(columns) - 1)})",
                [tuple(_value(f, c) for c in columns)
                 for f in compaction.fold_card_samples(rows)])
            self.conn.execute("DELETE FROM card_samples WHERE n IS NULL AND time < ?", (edge,))
        return len(rows), more


def _decoded(text: str | None) -> list[str]:
    return list(json.loads(text) or []) if text else []
