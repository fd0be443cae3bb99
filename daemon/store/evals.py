"""The held-out loss (issue 26): a pass's eval records, and what a run's output reads of its
steps (the steps a resume cost again)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from daemon.store.codec import _finite_or_none, _loss_flag
from daemon.store.connection import Connection
from trainer import records

_INSERT_EVAL = (
    "INSERT INTO evals (run_id, config_label, step, loss, loss_flag, perplexity, tokens,"
    " examples, seconds, time) VALUES (?,?,?,?,?,?,?,?,?,?)"
    " ON CONFLICT (run_id, config_label, step) DO NOTHING")

_EVAL_ROW = "step, loss, loss_flag, perplexity, tokens, examples, seconds, time"


def _eval_row(row: tuple) -> dict:
    """A stored eval as readers get it: the loss as stored (NaN or an infinity back from its
    flag), the perplexity beside it (an infinity where exp overflowed, NaN for a NaN loss)."""
    step, loss, flag, perplexity, tokens, examples, seconds, t = row
    if flag:
        loss = float(flag)
    if perplexity is None and loss is not None:
        try:
            perplexity = math.exp(loss)  # NaN for NaN, 0 for -inf
        except OverflowError:
            perplexity = math.inf
    return {"step": step, "loss": loss, "perplexity": perplexity, "tokens": tokens,
            "examples": examples, "seconds": seconds, "time": t}


class Evals(Connection):
    """The evals table, and the step counts a resume is measured by."""

    # === evals ===============================================================

    def add_evals(self, run_id: int, evals: Iterable[records.Eval]) -> int:
        """Store eval records; one already stored (same pass and step) is ignored, as a
        step is. Returns how many were new."""
        rows = [(run_id, e.config_label, e.step, _finite_or_none(e.loss), _loss_flag(e.loss),
                 _finite_or_none(e.perplexity), e.tokens, e.examples, e.seconds, e.time)
                for e in evals]
        if not rows:
            return 0
        with self._transaction():
            before = self.conn.total_changes
            self.conn.executemany(_INSERT_EVAL, rows)
            return self.conn.total_changes - before

    def evals(self, run_id: int, config_label: str = records.MAIN, *,
              after_step: int = -1) -> list[dict]:
        """One pass's evals after ``after_step`` (-1: all, from step 0), in step order."""
        rows = self.conn.execute(
            f"SELECT {_EVAL_ROW} FROM evals WHERE run_id = ? AND config_label = ? AND step > ?"
            " ORDER BY step", (run_id, config_label, after_step)).fetchall()
        return [_eval_row(r) for r in rows]

    def best_eval(self, run_id: int, config_label: str = records.MAIN) -> dict | None:
        """The pass's eval with the lowest finite loss (the earliest of equals), or None."""
        row = self.conn.execute(
            f"SELECT {_EVAL_ROW} FROM evals WHERE run_id = ? AND config_label = ?"
            " AND loss IS NOT NULL ORDER BY loss, step LIMIT 1",
            (run_id, config_label)).fetchone()
        return _eval_row(row) if row else None

    def eval_series(self, run_id: int, config_label: str = records.MAIN, *,
                    after_step: int = -1) -> list[tuple[int, float | None]]:
        """``(step, loss)`` of the pass's evals after ``after_step``, in order: the TUI's
        light read (no dicts), a NaN or infinity back from its flag."""
        rows = self.conn.execute(
            "SELECT step, CASE WHEN loss_flag IS NOT NULL THEN loss_flag ELSE loss END"
            " FROM evals WHERE run_id = ? AND config_label = ? AND step > ? ORDER BY step",
            (run_id, config_label, after_step)).fetchall()
        return [(s, None if loss is None else float(loss)) for s, loss in rows]

    # === resumes =============================================================

    def steps_redone(self, run_id: int, config_label: str, after_step: int,
                     before: float) -> int:
        """Steps of a pass numbered past ``after_step`` that were stored with a time before
        ``before``: what a process resumed at ``before`` from a checkpoint at ``after_step``
        trains again (the store keeps their first copy).

        Those steps are the ones up to the first step past ``after_step`` timed at or after
        ``before`` (the resumed process's first new one): the count walks that far, not the
        whole pass.
        """
        first_new = self.conn.execute(
            "SELECT step FROM steps WHERE run_id = ? AND config_label = ? AND step > ?"
            " AND NOT (time < ?) ORDER BY step LIMIT 1",
            (run_id, config_label, after_step, before)).fetchone()
        bound = first_new[0] if first_new else records.INT64_MAX
        row = self.conn.execute(
            "SELECT COUNT(*) FROM steps WHERE run_id = ? AND config_label = ? AND step > ?"
            " AND step < ? AND time < ?",
            (run_id, config_label, after_step, bound, before)).fetchone()
        return row[0]
