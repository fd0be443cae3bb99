"""A pass's numbers from SQL order statistics, and a finished run's sealed ones.

What daemon.stepmodel.stats and daemon.stepmodel need: never a decoded row per step.
"""

from __future__ import annotations

import json
from typing import Any

from daemon.store.connection import Connection
from daemon.store.runs import FINISHED
from daemon.store.schema import STEADY_FIRST, steady_from


class Aggregates(Connection):
    """Step aggregates over the version-7 indexes; sealed rows."""

    # === step aggregates =====================================================
    # What daemon.stepmodel.stats and daemon.stepmodel need from a pass, computed by
    # SQLite over the version-7 indexes: a pass of 1,000,000 steps costs a few
    # index walks in C, never a decoded row per step. "Steady" means steps
    # STEADY_FIRST-N (6-N).

    def pass_counts(self, run_id: int, config_label: str) -> tuple[int, int]:
        """(steps, steady steps) of one pass, as kept at ingest."""
        row = self.conn.execute(
            "SELECT steps, steady FROM pass_totals WHERE run_id = ? AND config_label = ?",
            (run_id, config_label)).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    @staticmethod
    def _steady_from(column: str) -> str:
        return steady_from(column)

    @staticmethod
    def _absent(column: str) -> tuple[str, str]:
        """SQL for a steady step that lacks ``column``, and for one that has it."""
        if column == "tokens":  # the step model counts a 0-token step as its shape's tokens
            return "tokens = 0", "tokens != 0"
        return f"{column} IS NULL", f"{column} IS NOT NULL"

    def steady_sorted(self, run_id: int, config_label: str, column: str, offset: int,
                      count: int = 1, *, absent_as: float | None = None) -> list:
        """Values of ``column`` over the steady steps in ascending order, ``count`` of them
        from position ``offset`` (0-based): order statistics by walking the column's index.

        A step that lacks the column (``steady_absent``) takes the value ``absent_as``
        (0.0 for a phase, as stepmodel reads a missing phase) in the order.
        """
        marked = self._marked_sorted(run_id, config_label, column, offset, count, absent_as)
        if marked is not None:  # a walk of a step or none, from the markers kept at ingest
            return marked
        frm, key = self._steady_from(column), (run_id, config_label)
        present = self._absent(column)[1]
        n_absent = self.steady_absent(run_id, config_label, column) if absent_as is not None \
            else 0

        def walk(where: str, params: tuple, skip: int, take: int) -> list:
            return [r[0] for r in self.conn.execute(
                f"SELECT {column} {frm}{where} ORDER BY {column} LIMIT ? OFFSET ?",
                (*key, *params, take, skip))]

        if not n_absent:  # the plain order: nothing to put in its place
            return walk("", (), offset, count)
        # The order is: present values below absent_as, the absent ones, the rest.
        below = self.conn.execute(f"SELECT COUNT(*) {frm} AND {present} AND {column} < ?",
                                  (*key, absent_as)).fetchone()[0]
        end = offset + count
        out = walk(f" AND {present} AND {column} < ?", (absent_as,), offset, min(end, below) - offset) \
            if offset < below else []
        out += [absent_as] * max(0, min(end, below + n_absent) - max(offset, below))
        if end > below + n_absent:
            skip = max(offset, below + n_absent) - below - n_absent
            out += walk(f" AND {column} >= ?", (absent_as,), skip, end - max(offset,
                                                                             below + n_absent))
        return out

    def _span(self, run_id: int, config_label: str, first: int) -> tuple[int, int] | None:
        # MIN and MAX in one SELECT would scan the pass; a subquery each is one index seek.
        where = "FROM steps WHERE run_id = ? AND config_label = ? AND step >= ?"
        row = self.conn.execute(f"SELECT (SELECT MIN(step) {where}), (SELECT MAX(step) {where})",
                                (run_id, config_label, first) * 2).fetchone()
        return None if row[0] is None else (row[0], row[1])

    def step_span(self, run_id: int, config_label: str) -> tuple[int, int] | None:
        """The first and last step numbers of a pass, or None."""
        return self._span(run_id, config_label, -2 ** 63)

    def steady_span(self, run_id: int, config_label: str) -> tuple[int, int] | None:
        """The first and last steady step numbers, or None."""
        return self._span(run_id, config_label, STEADY_FIRST)

    def slowest_steady_step(self, run_id: int, config_label: str) -> tuple[float, int] | None:
        """(step_s, step) of the slowest steady step; the first of equals."""
        frm = self._steady_from("step_s")
        row = self.conn.execute(f"SELECT step_s {frm} ORDER BY step_s DESC LIMIT 1",
                                (run_id, config_label)).fetchone()
        if row is None:
            return None
        step = self.conn.execute(f"SELECT MIN(step) {frm} AND step_s = ?",
                                 (run_id, config_label, row[0])).fetchone()[0]
        return row[0], step

    def end_losses(self, run_id: int, config_label: str) -> tuple:
        """(first step's loss, last step's loss), NaN and infinities restored; Nones if empty."""
        out = []
        for order in ("ASC", "DESC"):
            row = self.conn.execute(
                "SELECT CASE WHEN loss_flag IS NOT NULL THEN loss_flag ELSE loss END FROM steps"
                f" WHERE run_id = ? AND config_label = ? ORDER BY step {order} LIMIT 1",
                (run_id, config_label)).fetchone()
            out.append(None if row is None or row[0] is None else float(row[0]))
        return tuple(out)

    def nonfinite_losses(self, run_id: int, config_label: str) -> tuple[int, int | None, list]:
        """(how many steps have no finite loss, the first of them, their losses' kinds).

        The kinds are the distinct losses as stored: NaN, an infinity, or None.
        """
        rows = self.conn.execute(
            "SELECT loss_flag, COUNT(*), MIN(step) FROM steps INDEXED BY steps_nonfinite"
            " WHERE run_id = ? AND config_label = ? AND loss IS NULL GROUP BY loss_flag",
            (run_id, config_label)).fetchall()
        if not rows:
            return 0, None, []
        kinds = [None if flag is None else float(flag) for flag, _, _ in rows]
        return sum(n for _, n, _ in rows), min(first for _, _, first in rows), kinds

    def range_totals(self, run_id: int, config_label: str, first: int,
                     last: int) -> tuple[int, int, float | None]:
        """(steps, steps with a finite loss, the sum of those losses) in steps first-last."""
        n, finite, total = self.conn.execute(
            "SELECT COUNT(*), COUNT(loss), SUM(loss) FROM steps WHERE run_id = ? AND"
            " config_label = ? AND step BETWEEN ? AND ?",
            (run_id, config_label, first, last)).fetchone()
        return n, finite, total

    def range_step_s(self, run_id: int, config_label: str, first: int, last: int) -> list[float]:
        """step_s of steps first-last in step order (for short ranges)."""
        return [r[0] for r in self.conn.execute(
            "SELECT step_s FROM steps WHERE run_id = ? AND config_label = ? AND step BETWEEN ?"
            " AND ? ORDER BY step", (run_id, config_label, first, last))]

    def range_sorted_step_s(self, run_id: int, config_label: str, first: int, last: int,
                            offset: int, count: int = 1) -> list[float]:
        """step_s of steps first-last (first >= STEADY_FIRST) in ascending order, from ``offset``."""
        if first < STEADY_FIRST:
            raise ValueError(f"the steady index starts at step {STEADY_FIRST}, not {first}")
        return [r[0] for r in self.conn.execute(
            f"SELECT step_s {self._steady_from('step_s')} AND step BETWEEN ? AND ?"
            " ORDER BY step_s LIMIT ? OFFSET ?",
            (run_id, config_label, first, last, count, offset))]

    # === sealed aggregates (issue 12) ========================================
    # A finished run's numbers, computed once (daemon/stepmodel/stats.py ``seal``) and read
    # back as one row each: JSON values, NaN and infinities kept.

    def run_step_total(self, run_id: int) -> int:
        """Steps stored for the run over all its passes (kept at ingest)."""
        return self.conn.execute("SELECT COALESCE(SUM(steps), 0) FROM pass_totals"
                                 " WHERE run_id = ?", (run_id,)).fetchone()[0]

    def seal_aggregates(self, run_id: int, values: dict[str, Any], *, steps: int) -> None:
        """Replace the run's sealed aggregates with ``values`` (name -> JSON value), computed
        over ``steps`` stored steps (``run_step_total`` read before computing them)."""
        with self._transaction():
            self.conn.execute("DELETE FROM sealed_aggregates WHERE run_id = ?", (run_id,))
            self.conn.executemany(
                "INSERT INTO sealed_aggregates (run_id, name, steps, value) VALUES (?,?,?,?)",
                [(run_id, name, steps, json.dumps(value))
                 for name, value in values.items()])

    def sealed_aggregates(self, run_id: int) -> dict[str, Any]:
        """Name -> value of the run's sealed aggregates; {} when none, or when a step was
        stored after they were computed."""
        rows = self.conn.execute(
            "SELECT name, value FROM sealed_aggregates WHERE run_id = ? AND steps ="
            " (SELECT COALESCE(SUM(steps), 0) FROM pass_totals WHERE run_id = ?)",
            (run_id, run_id)).fetchall()
        return {name: json.loads(value) for name, value in rows}

    def unsealed_runs(self, limit: int) -> list[int]:
        """Finished runs with steps whose sealed aggregates are missing or stale, newest
        first (what a daemon seals at start: stores from before version 9)."""
        placeholders = ",".join("?" * len(FINISHED))
        return [r[0] for r in self.conn.execute(
            f"SELECT r.id FROM runs r WHERE r.status IN ({placeholders}) AND EXISTS"
            " (SELECT 1 FROM pass_totals t WHERE t.run_id = r.id AND t.steps > 0)"
            " AND NOT EXISTS (SELECT 1 FROM sealed_aggregates a WHERE a.run_id = r.id AND"
            " a.steps = (SELECT SUM(steps) FROM pass_totals WHERE run_id = r.id))"
            " ORDER BY r.id DESC LIMIT ?", (*FINISHED, limit))]

    # === a running pass's state (issue 12) ===================================
    # What the daemon keeps of a pass between ingests (its plots, daemon/run/plots.py),
    # so a reader's first look at a running run reads one row, not every step.

    def pass_state(self, run_id: int, config_label: str, name: str) -> tuple[int, Any] | None:
        """(the pass's stored steps when it was kept, the value), or None."""
        row = self.conn.execute(
            "SELECT steps, value FROM pass_state WHERE run_id = ? AND config_label = ?"
            " AND name = ?", (run_id, config_label, name)).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def pass_state_steps(self, run_id: int, config_label: str, name: str) -> int | None:
        """The pass's stored steps when ``name`` was kept (its value not decoded), or None."""
        row = self.conn.execute(
            "SELECT steps FROM pass_state WHERE run_id = ? AND config_label = ?"
            " AND name = ?", (run_id, config_label, name)).fetchone()
        return None if row is None else row[0]

    def set_pass_state(self, run_id: int, config_label: str, name: str, value: Any, *,
                       steps: int) -> None:
        """Keep ``value`` (JSON) for the pass, computed over ``steps`` stored steps."""
        self.conn.execute(
            "INSERT OR REPLACE INTO pass_state (run_id, config_label, name, steps, value)"
            " VALUES (?,?,?,?,?)", (run_id, config_label, name, steps, json.dumps(value)))
