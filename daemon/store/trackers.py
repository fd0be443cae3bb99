"""What each tracker (TensorBoard, MLflow) was sent: its cursors, and the reads that feed it.

A tracker is named by its key (``tensorboard:<folder>``, ``mlflow:<uri>``: daemon/trackers/).
Per run it has a row (where the run is there, whether its config went in, which end went
in) and per pass a cursor (the last step and eval sent; for an event file, its bytes at
that cursor). Everything sent comes from the store, so the cursors are all a tracker needs
to go on after a restart, an outage or a change of config.
"""

from __future__ import annotations

from daemon.store.connection import Connection
from daemon.store.schema import PHASE_COLUMNS
from trainer import records

#: A step as a tracker reads it: plain columns, no JSON decoded (the phases are real columns).
_TRACKED_STEP = ("step, CASE WHEN loss_flag IS NOT NULL THEN loss_flag ELSE loss END, step_s,"
                 f" tokens, lr, time, {', '.join(PHASE_COLUMNS.values())}")


class Trackers(Connection):
    """The trackers, tracker_runs and tracker_passes tables."""

    def tracker_since(self, tracker: str, now: float) -> float:
        """When the daemon first followed ``tracker`` (``now`` the first time it asks)."""
        with self._transaction():
            self.conn.execute("INSERT OR IGNORE INTO trackers (tracker, since) VALUES (?, ?)",
                              (tracker, now))
            return self.conn.execute("SELECT since FROM trackers WHERE tracker = ?",
                                     (tracker,)).fetchone()[0]

    def tracker_due(self, tracker: str, since: float, *, limit: int = 100) -> list[dict]:
        """Runs with something for ``tracker`` maybe unsent: runs that started (a pass is
        stored) and have not ended, or ended at or after ``since`` without that end sent;
        oldest first."""
        return self._rows(
            "SELECT r.* FROM runs r LEFT JOIN tracker_runs t ON t.tracker = ? AND t.run_id = r.id"
            " WHERE EXISTS (SELECT 1 FROM passes p WHERE p.run_id = r.id)"
            " AND (r.ended IS NULL OR (r.ended >= ? AND (t.ended IS NULL OR t.ended != r.ended)))"
            " ORDER BY r.id LIMIT ?", [tracker, since, limit])

    # === a run there ========================================================

    def tracker_run(self, tracker: str, run_id: int) -> dict:
        """``remote``, ``params`` (bool) and ``ended`` of the run there (None, False, None
        before anything was sent)."""
        row = self.conn.execute(
            "SELECT remote, params, ended FROM tracker_runs WHERE tracker = ? AND run_id = ?",
            (tracker, run_id)).fetchone()
        remote, params, ended = row or (None, 0, None)
        return {"remote": remote, "params": bool(params), "ended": ended}

    def set_tracker_run(self, tracker: str, run_id: int, **values) -> None:
        """Set ``remote``, ``params`` and/or ``ended`` of the run there."""
        known = {"remote", "params", "ended"}
        assert values and set(values) <= known, values
        names = sorted(values)
        with self._transaction():
            self.conn.execute("INSERT OR IGNORE INTO tracker_runs (tracker, run_id) VALUES (?, ?)",
                              (tracker, run_id))
            self.conn.execute(
                f"UPDATE tracker_runs SET {', '.join(f'{n} = ?' for n in names)}"
                " WHERE tracker = ? AND run_id = ?",
                [values[n] for n in names] + [tracker, run_id])

    # === a pass's cursor ====================================================

    def tracker_pass(self, tracker: str, run_id: int, config_label: str) -> dict:
        """``step`` and ``eval_step`` last sent (0 and -1: none), ``file`` and its ``size``."""
        row = self.conn.execute(
            "SELECT step, eval_step, file, size FROM tracker_passes"
            " WHERE tracker = ? AND run_id = ? AND config_label = ?",
            (tracker, run_id, config_label)).fetchone()
        step, eval_step, file, size = row or (0, -1, None, None)
        return {"step": step, "eval_step": eval_step, "file": file, "size": size}

    def set_tracker_pass(self, tracker: str, run_id: int, config_label: str, *, step: int,
                         eval_step: int, file: str | None = None, size: int | None = None,
                         ended: float | None = None) -> None:
        """The pass's cursor after a send; with ``ended``, the run's end went in with it (in
        the same transaction). The steps never move back: of two writers sending the same
        points (the daemon and ``export``), the one that stored its cursor last may have
        sent less."""
        with self._transaction():
            if ended is not None:
                self.conn.execute(
                    "INSERT INTO tracker_runs (tracker, run_id, ended) VALUES (?, ?, ?)"
                    " ON CONFLICT (tracker, run_id) DO UPDATE SET ended = excluded.ended",
                    (tracker, run_id, ended))
            self.conn.execute(
                "INSERT INTO tracker_passes (tracker, run_id, config_label, step, eval_step,"
                " file, size) VALUES (?,?,?,?,?,?,?)"
                " ON CONFLICT (tracker, run_id, config_label) DO UPDATE SET"
                " step = MAX(step, excluded.step), eval_step = MAX(eval_step, excluded.eval_step),"
                " file = excluded.file, size = excluded.size",
                (tracker, run_id, config_label, step, eval_step, file, size))

    def forget_tracker_pass(self, tracker: str, run_id: int, config_label: str) -> None:
        """Start the pass over there (its event file was lost: it is written again whole)."""
        with self._transaction():
            self.conn.execute("DELETE FROM tracker_passes WHERE tracker = ? AND run_id = ?"
                              " AND config_label = ?", (tracker, run_id, config_label))

    def forget_tracker_run(self, tracker: str, run_id: int) -> None:
        """Start the run over there (it was deleted there: it is made and sent again)."""
        with self._transaction():
            for table in ("tracker_passes", "tracker_runs"):
                self.conn.execute(f"DELETE FROM {table} WHERE tracker = ? AND run_id = ?",
                                  (tracker, run_id))

    # === what is sent =======================================================

    def tracked_steps(self, run_id: int, config_label: str, *, after: int,
                      limit: int) -> list[tuple]:
        """Up to ``limit`` steps of a pass after step ``after``, in order: ``(step, loss,
        step_s, tokens, lr, time, *phases)`` with the phases in ``records.PHASES`` order
        (None where missing) and a non-finite loss back from its flag."""
        rows = self.conn.execute(
            f"SELECT {_TRACKED_STEP} FROM steps WHERE run_id = ? AND config_label = ?"
            " AND step > ? ORDER BY step LIMIT ?",
            (run_id, config_label, after, limit)).fetchall()
        return [(s, None if loss is None else float(loss), *rest) for s, loss, *rest in rows]

    def pass_labels(self, run_id: int) -> list[str]:
        """The run's passes, the main one first."""
        labels = [r[0] for r in self.conn.execute(
            "SELECT config_label FROM passes WHERE run_id = ? ORDER BY config_label",
            (run_id,))]
        return sorted(labels, key=lambda label: label != records.MAIN)
