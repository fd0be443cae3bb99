"""A running pass's order statistics at the same cost whatever its length (issue 12).

SQLite's indexes keep no counts: the k-th value of a column over a pass's
steady steps is a LIMIT/OFFSET walk of k index entries, half a million at the
median of a 1,000,000-step pass. A marker is a value ``v`` of a column with
``below`` (steady steps holding a smaller value) and ``through`` (a value no
larger): ranks below..through-1 hold v, and any other rank is a walk from v
as long as its distance to them.

Ingest keeps the markers (``add_steps``, in the steps' own transaction): it
counts the new steps against each marker in one scan of the new rows, then
moves each marker to the rank its statistic needs now (a walk of about half
the steps added). A reader of the medians and quartiles then walks one step
or none. Markers count present values only (a phase's NULL is no value); a
phase's ``zero`` marker stays at 0.0, so a reader knows where the missing
phases, read as 0.0, fall in the order. Each row holds the pass's steady count
it was kept for: a reader trusts only markers of the current count.
"""

from __future__ import annotations

from daemon.store.connection import Connection
from daemon.store.schema import PHASE_COLUMNS, STEADY_FIRST, steady_from

#: The rank (0-based, over n steady steps) each statistic reads first: the median's
#: (``stats.median_of_sorted``) and the quartiles' (``stats.quartiles_of_sorted``).
SLOT_RANKS = {"median": lambda n: (n - 1) // 2, "q1": lambda n: (n - 1) // 4,
              "q3": lambda n: 3 * (n - 1) // 4}
#: The phases whose quartiles are read as well as their median: the device compute's, for
#: the verdict's host rule (``PassStats.fwd_bwd_iqr``, read by show, show --json and the TUI
#: for a sealed run too). Without a marker at a quartile's rank, its read walks from the
#: median's, a quarter of the pass: 250,000 index entries at 1,000,000 steps.
QUARTILE_PHASES = ("fwd_bwd",)
#: The columns ingest keeps markers in, and their slots: what ``stats.live_pass_stats`` and
#: ``stats.steady_medians`` read.
MARKED = {"step_s": ("median", "q1", "q3"), "tokens": ("median",),
          **{c: ("median", "q1", "q3") if p in QUARTILE_PHASES else ("median",)
             for p, c in PHASE_COLUMNS.items()}}
#: Where a steady step lacks a column: SQL for it, counted at ingest (``steady_absent``).
ABSENT = {"tokens": "tokens = 0", **{c: f"{c} IS NULL" for c in PHASE_COLUMNS.values()}}
#: A missing phase is read as this in the order (``stats.live_pass_stats``).
PHASE_ABSENT_AS = 0.0

Mark = list  # [value, below, through]


class Markers(Connection):
    """The order_markers and steady_absent tables."""

    # === order markers (issue 12) ============================================

    def steady_absent(self, run_id: int, config_label: str, column: str) -> int:
        """How many steady steps lack ``column`` (a phase column: NULL; tokens: 0), as
        counted at ingest."""
        if column not in ABSENT:
            raise ValueError(f"no absent count for the column {column!r}")
        row = self.conn.execute(
            "SELECT absent FROM steady_absent WHERE run_id = ? AND config_label = ?"
            " AND column_name = ?", (run_id, config_label, column)).fetchone()
        return row[0] if row else 0

    def _steady_count(self, run_id: int, config_label: str) -> int:
        row = self.conn.execute(
            "SELECT steady FROM pass_totals WHERE run_id = ? AND config_label = ?",
            (run_id, config_label)).fetchone()
        return row[0] if row else 0

    def _marks(self, run_id: int, config_label: str, column: str | None = None,
               steady: int | None = None) -> dict[tuple[str, str], Mark]:
        """(column, slot) -> [value, below, through] of a pass's markers (of ``column``, kept
        for ``steady`` steady steps, where given)."""
        sql = ("SELECT column_name, slot, value, below, through FROM order_markers"
               " WHERE run_id = ? AND config_label = ?")
        params: list = [run_id, config_label]
        if column is not None:
            sql += " AND column_name = ?"
            params.append(column)
        if steady is not None:
            sql += " AND steady = ?"
            params.append(steady)
        return {(c, slot): [v, b, t] for c, slot, v, b, t in self.conn.execute(sql, params)}

    def _walk(self, run_id: int, config_label: str, column: str, mark: Mark | None,
              rank: int):
        """The value at ``rank`` (0-based) in the order of the column's present steady
        values, walked from ``mark`` (from the first value when None); None past the end."""
        frm, key = steady_from(column), (run_id, config_label)
        if mark is None:
            sql, params = f" AND {column} IS NOT NULL ORDER BY {column}", (rank,)
        elif mark[1] <= rank < mark[2]:
            return mark[0]
        elif rank >= mark[2]:
            sql, params = f" AND {column} > ? ORDER BY {column}", (mark[0], rank - mark[2])
        else:
            sql, params = (f" AND {column} < ? ORDER BY {column} DESC",
                           (mark[0], mark[1] - 1 - rank))
        row = self.conn.execute(f"SELECT {column} {frm}{sql} LIMIT 1 OFFSET ?",
                                (*key, *params)).fetchone()
        return None if row is None else row[0]

    def _count(self, run_id: int, config_label: str, column: str, where: str,
               params: tuple) -> int:
        return self.conn.execute(f"SELECT COUNT(*) {steady_from(column)} AND {where}",
                                 (run_id, config_label, *params)).fetchone()[0]

    def _aim(self, run_id: int, config_label: str, column: str, mark: Mark | None,
             rank: int) -> Mark | None:
        """A marker at ``rank`` of the present values: ``mark`` moved there (a walk of the
        distance), or a new one when None (a walk from the first value)."""
        if mark is not None and mark[1] <= rank < mark[2]:
            return mark
        value = self._walk(run_id, config_label, column, mark, rank)
        if value is None:
            return mark
        # The new value's equals and the values it passed: one scan of the range walked.
        if mark is None:
            where, params = f"{column} <= ?", (value,)
        elif rank >= mark[2]:
            where, params = f"{column} > ? AND {column} <= ?", (mark[0], value)
        else:
            where, params = f"{column} >= ? AND {column} < ?", (value, mark[0])
        equal, passed = self.conn.execute(
            f"SELECT SUM({column} = ?), SUM({column} != ?) {steady_from(column)} AND {where}",
            (value, value, run_id, config_label, *params)).fetchone()
        equal, passed = equal or 0, passed or 0
        if mark is None:
            below = passed
        elif rank >= mark[2]:
            below = mark[2] + passed
        else:
            below = mark[1] - passed - equal
        return [value, below, below + equal]

    def _present_rank(self, rank: int, nulls: int, zero: Mark | None) -> int | None:
        """Where steady rank ``rank`` falls among a phase's present values, a missing phase
        read as 0.0: None when it is one of the missing ones."""
        if not nulls:
            return rank
        below = zero[1] if zero is not None else None
        if below is None:
            return None
        if rank < below:
            return rank
        return None if rank < below + nulls else rank - nulls

    def _keep_markers(self, run_id: int, after_rowid: int) -> None:
        """Count this run's steps stored after row ``after_rowid`` (the new ones) against
        each marker and absent count of their passes, then move each marker to the rank
        its statistic needs now. In add_steps' transaction, after ``pass_totals``.

        The new rows are read by rowid (NOT INDEXED): through a (run, pass, step) index
        the planner would walk every steady step of the pass to find them, each batch."""
        labels = [r[0] for r in self.conn.execute(
            "SELECT DISTINCT config_label FROM steps NOT INDEXED WHERE rowid > ? AND run_id = ?"
            f" AND step >= {STEADY_FIRST}", (after_rowid, run_id))]
        for label in labels:
            self._keep_pass_markers(run_id, label, after_rowid)

    def _keep_pass_markers(self, run_id: int, label: str, after_rowid: int) -> None:
        marks = self._marks(run_id, label)
        items = list(marks.items())
        # One scan of the new steady rows: what they lack, and where each falls
        # against each marker.
        sums = [f"SUM({condition})" for condition in ABSENT.values()]
        params: list = []
        for (column, _slot), mark in items:
            sums += [f"SUM({column} < ?)", f"SUM({column} <= ?)"]
            params += [mark[0], mark[0]]
        row = self.conn.execute(
            f"SELECT {', '.join(sums)} FROM steps NOT INDEXED WHERE rowid > ? AND run_id = ?"
            f" AND config_label = ? AND step >= {STEADY_FIRST}",
            (*params, after_rowid, run_id, label)).fetchone()
        row = [n or 0 for n in row]
        self.conn.executemany(
            "INSERT INTO steady_absent (run_id, config_label, column_name, absent)"
            " VALUES (?,?,?,?) ON CONFLICT (run_id, config_label, column_name)"
            " DO UPDATE SET absent = absent + excluded.absent",
            [(run_id, label, column, n) for column, n in zip(ABSENT, row)])
        for i, (_key, mark) in enumerate(items):
            mark[1] += row[len(ABSENT) + 2 * i]
            mark[2] += row[len(ABSENT) + 2 * i + 1]
        n = self._steady_count(run_id, label)
        absent = dict(self.conn.execute(
            "SELECT column_name, absent FROM steady_absent WHERE run_id = ? AND config_label = ?",
            (run_id, label)))
        for column, slots in MARKED.items():
            nulls, zero = 0, None
            if column in PHASE_COLUMNS.values():
                nulls = absent.get(column, 0)
                zero = marks.get((column, "zero"))
                if zero is None:
                    below = self._count(run_id, label, column, f"{column} < ?",
                                        (PHASE_ABSENT_AS,))
                    zero = marks[(column, "zero")] = [PHASE_ABSENT_AS, below, below + self._count(
                        run_id, label, column, f"{column} = ?", (PHASE_ABSENT_AS,))]
            for slot in slots:
                rank = self._present_rank(SLOT_RANKS[slot](n), nulls, zero)
                if rank is None:
                    continue  # a missing phase: read as 0.0, no value to mark
                aimed = self._aim(run_id, label, column, marks.get((column, slot)), rank)
                if aimed is not None:
                    marks[(column, slot)] = aimed
        self.conn.executemany(
            "INSERT OR REPLACE INTO order_markers (run_id, config_label, column_name, slot,"
            " value, below, through, steady) VALUES (?,?,?,?,?,?,?,?)",
            [(run_id, label, column, slot, *mark, n) for (column, slot), mark in marks.items()])

    def _marked_sorted(self, run_id: int, config_label: str, column: str, offset: int,
                       count: int, absent_as: float | None) -> list | None:
        """``steady_sorted`` read from the markers; None where they cannot answer (none kept
        for the pass's current count, or 0-token steps to place at ``absent_as``)."""
        if column not in MARKED:
            return None
        with self._snapshot():  # the markers and the walk from them: one commit's
            return self._marked_sorted_now(run_id, config_label, column, offset, count,
                                           absent_as)

    def _marked_sorted_now(self, run_id: int, config_label: str, column: str, offset: int,
                           count: int, absent_as: float | None) -> list | None:
        n = self._steady_count(run_id, config_label)
        marks = self._marks(run_id, config_label, column, steady=n)
        if not marks:
            return None
        is_phase = column in PHASE_COLUMNS.values()
        nulls = self.steady_absent(run_id, config_label, column) if is_phase else 0
        zero = marks.get((column, "zero"))
        if column == "tokens" and absent_as is not None \
                and self.steady_absent(run_id, config_label, column):
            return None
        if is_phase and absent_as is not None and (absent_as != PHASE_ABSENT_AS or zero is None):
            return None
        out = []
        for rank in range(offset, min(offset + count, n)):
            if is_phase and absent_as is None:  # the index's order: missing (NULL) first
                present = rank - nulls if rank >= nulls else None
                if present is None:
                    out.append(None)
                    continue
            elif is_phase:
                present = self._present_rank(rank, nulls, zero)
                if present is None:
                    out.append(absent_as)
                    continue
            else:
                present = rank
            nearest = min(marks.values(), key=lambda m: max(m[1] - present,
                                                             present - m[2] + 1, 0))
            value = self._walk(run_id, config_label, column, nearest, present)
            if value is None:
                return None  # the markers disagree with the steps: read them instead
            out.append(value)
        return out
