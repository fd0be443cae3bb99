"""Passes and steps: ingest, the decoded reads, the TUI's light reads, export's stream."""

from __future__ import annotations

from collections.abc import Iterable

from daemon.store.codec import _finite_or_none, _json, _loss_flag, _phase_value
from daemon.store.connection import Connection
from daemon.store.schema import PHASE_COLUMNS, STEADY_FIRST
from trainer import records

_INSERT_STEP = (
    "INSERT INTO steps (run_id, config_label, step, loss, loss_flag, step_s, tokens,"
    f" lr, phases, memory, extra, time, {', '.join(PHASE_COLUMNS.values())})"
    f" VALUES ({','.join('?' * (12 + len(PHASE_COLUMNS)))})"
    " ON CONFLICT (run_id, config_label, step) DO NOTHING")

#: A step row as readers get it (the phase columns repeat ``phases`` for the aggregates).
_STEP_ROW = ("run_id, config_label, step, loss, loss_flag, step_s, tokens, lr, phases, memory,"
             " extra, time")


class Steps(Connection):
    """The passes and steps tables."""

    # === passes ==============================================================

    def add_pass(self, run_id: int, start: records.Start) -> None:
        self.conn.execute(
            "INSERT OR IGNORE INTO passes (run_id, config_label, config, time) VALUES (?, ?, ?, ?)",
            (run_id, start.config_label, _json(start.config), start.time),
        )

    def passes(self, run_id: int) -> list[dict]:
        return self._rows("SELECT * FROM passes WHERE run_id = ? ORDER BY time, config_label",
                          [run_id])

    # === steps ===============================================================

    def add_steps(self, run_id: int, steps: Iterable[records.Step]) -> int:
        """Store steps; a step already stored is ignored. Returns how many were new.

        Each pass's step counts (``pass_totals``) grow by the steps that were new,
        and its order markers follow them (``_keep_markers``), in the same transaction.
        """
        groups: dict[tuple[str, bool], list[tuple]] = {}
        for s in steps:
            phases = s.phases
            groups.setdefault((s.config_label, s.step >= STEADY_FIRST), []).append((
                run_id, s.config_label, s.step, _finite_or_none(s.loss), _loss_flag(s.loss),
                s.step_s, s.tokens, s.lr, _json(phases), _json(s.memory), _json(s.extra), s.time,
                *(_phase_value(phases, p) for p in PHASE_COLUMNS)))
        if not groups:
            return 0
        new: dict[str, list[int]] = {}
        with self._transaction():
            # New rows get rowids past the largest (steps are never deleted).
            after_rowid = self.conn.execute(
                "SELECT COALESCE(MAX(rowid), 0) FROM steps").fetchone()[0]
            # Only a step already stored is skipped (ON CONFLICT DO NOTHING): OR IGNORE
            # would also skip a NULL in a NOT NULL column without a word, and lose the step.
            for (label, steady), rows in groups.items():
                before = self.conn.total_changes
                self.conn.executemany(_INSERT_STEP, rows)
                counts = new.setdefault(label, [0, 0])
                added = self.conn.total_changes - before
                counts[0] += added
                counts[1] += added if steady else 0
            self.conn.executemany(
                "INSERT INTO pass_totals (run_id, config_label, steps, steady) VALUES (?,?,?,?)"
                " ON CONFLICT (run_id, config_label) DO UPDATE SET"
                " steps = steps + excluded.steps, steady = steady + excluded.steady",
                [(run_id, label, n, steady) for label, (n, steady) in new.items() if n])
            if any(steady for _, steady in new.values()):
                self._keep_markers(run_id, after_rowid)
        return sum(n for n, _ in new.values())

    def steps(self, run_id: int, config_label: str | None = records.MAIN) -> list[dict]:
        """Steps of one pass in order (every pass when config_label is None)."""
        if config_label is None:
            return self._rows(f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ?"
                              " ORDER BY config_label, step", [run_id])
        return self._rows(
            f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ? AND config_label = ? ORDER BY step",
            [run_id, config_label],
        )

    def step_counts(self, run_id: int) -> dict[str, int]:
        """Steps stored per pass (kept at ingest: no scan of the steps)."""
        rows = self.conn.execute(
            "SELECT config_label, steps FROM pass_totals WHERE run_id = ? AND steps > 0",
            (run_id,),
        ).fetchall()
        return {label: n for label, n in rows}

    def step_counts_of(self, run_ids: Iterable[int]) -> dict[int, dict[str, int]]:
        """``step_counts`` of many runs in one query (a run with no steps: {})."""
        ids = list(run_ids)
        counts: dict[int, dict[str, int]] = {run_id: {} for run_id in ids}
        for start in range(0, len(ids), 500):  # within SQLite's oldest limit of 999 parameters
            chunk = ids[start:start + 500]
            for run_id, label, n in self.conn.execute(
                    "SELECT run_id, config_label, steps FROM pass_totals WHERE steps > 0 AND"
                    f" run_id IN ({','.join('?' * len(chunk))})", chunk):
                counts[run_id][label] = n
        return counts

    def step_at(self, run_id: int, config_label: str, step: int) -> dict | None:
        """One step of a pass, decoded (as ``steps`` gives it), or None."""
        rows = self._rows(f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ? AND config_label = ?"
                          " AND step = ?", [run_id, config_label, step])
        return rows[0] if rows else None

    def steps_until(self, run_id: int, config_label: str, last: int) -> list[dict]:
        """Steps of one pass numbered ``last`` or less, in order (as ``steps``)."""
        return self._rows(
            f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ? AND config_label = ? AND step <= ?"
            " ORDER BY step", [run_id, config_label, last])

    def last_step(self, run_id: int, config_label: str = records.MAIN) -> dict | None:
        """The newest step of one pass, decoded, or None."""
        rows = self._rows(
            f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ? AND config_label = ?"
            " ORDER BY step DESC LIMIT 1",
            [run_id, config_label],
        )
        return rows[0] if rows else None

    # === light reads (the TUI) ===============================================
    # Plain tuples and sums, no JSON decoding, so a 100,000-step run can be
    # followed incrementally every second.

    def step_series(self, run_id: int, config_label: str = records.MAIN, *,
                    after_step: int = 0, limit: int = -1) -> list[tuple]:
        """``(step, loss, step_s, tokens, time)`` of steps after ``after_step``, in order
        (the first ``limit`` of them when given).

        A non-finite loss comes back as NaN or an infinity, as stored.
        """
        rows = self.conn.execute(
            "SELECT step, CASE WHEN loss_flag IS NOT NULL THEN loss_flag ELSE loss END,"
            " step_s, tokens, time FROM steps"
            " WHERE run_id = ? AND config_label = ? AND step > ? ORDER BY step LIMIT ?",
            (run_id, config_label, after_step, limit),
        ).fetchall()
        return [(s, None if loss is None else float(loss), step_s, tokens, t)
                for s, loss, step_s, tokens, t in rows]

    def stepped_seconds(self, run_id: int) -> float:
        """The sum of a run's step times over every pass (SQLite sums; no row is decoded)."""
        row = self.conn.execute("SELECT SUM(step_s) FROM steps WHERE run_id = ?",
                                (run_id,)).fetchone()
        return float(row[0] or 0.0)

    # === the ingest floor ====================================================

    def insert_step_rows(self, rows: list[tuple]) -> None:
        """One executemany of ready step rows (add_steps' column order), nothing else:
        the floor bench/ingest.py measures ``Ingest.feed`` against."""
        with self._transaction():
            self.conn.executemany(_INSERT_STEP, rows)

    # === streaming reads =====================================================
    # For export: a run's steps one batch at a time, in constant memory.

    def iter_steps(self, run_id: int, config_label: str = records.MAIN):
        """Steps of one pass in order, decoded one batch at a time (as ``steps``)."""
        return self._iter_rows(
            f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ? AND config_label = ? ORDER BY step",
            [run_id, config_label])
