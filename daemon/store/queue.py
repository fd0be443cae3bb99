"""The queue a researcher drives (issue 14): --after and priority, restart, the
evidence automatic retry weighs, and the estimates of a queued run's start and end."""

from __future__ import annotations

import time
from collections.abc import Iterable

from daemon.store.codec import _json
from daemon.store.connection import Connection
from daemon.store.runs import CANCELLED, DONE, FINISHED, QUEUED


class Queue(Connection):
    """Dependencies, priority, restarts and estimates."""

    # === dependencies and priority (issue 14) ================================

    def cancel_broken_dependents(self, *, now: float | None = None) -> list[tuple[int, str]]:
        """Cancel queued runs whose --after run ended other than done, with the reason.

        Chains follow in the same call (C after B after A: A failed cancels B, then
        C). Returns (run id, reason) of each run cancelled.
        """
        now = time.time() if now is None else now
        cancelled: list[tuple[int, str]] = []
        while True:
            rows = self.conn.execute(
                "SELECT r.id, d.id, d.status, d.exit_reason FROM runs r"
                " JOIN runs d ON d.id = r.after_run WHERE r.status = ? AND d.status IN"
                f" ({','.join('?' * len(FINISHED))}) AND d.status != ?",
                (QUEUED, *FINISHED, DONE)).fetchall()
            if not rows:
                return cancelled
            for run_id, dep, status, why in rows:
                first = (why or "").splitlines()[0] if why else ""
                reason = (f"run {dep}, which this run waits for (--after), ended {status}"
                          + (f": {first}" if first else ""))
                changed = self.conn.execute(
                    "UPDATE runs SET status = ?, ended = ?, exit_reason = ? "
                    "WHERE id = ? AND status = ?", (CANCELLED, now, reason, run_id, QUEUED)
                ).rowcount
                if changed:
                    self.add_event(run_id, "dependency", reason, data={"after": dep},
                                   now=now)
                    cancelled.append((run_id, reason))

    def set_priority(self, run_id: int, priority: int) -> None:
        self.update_run(run_id, priority=priority)

    def run_named(self, name: str) -> int | None:
        """The id of a run named ``name`` (a name is one run's), or None; one query."""
        row = self.conn.execute("SELECT id FROM runs WHERE name = ? LIMIT 1", (name,)).fetchone()
        return None if row is None else int(row[0])

    def names_starting(self, prefix: str) -> set[str]:
        """Every run name that starts with ``prefix``, in one query (``clone`` picks
        ``NAME-2``, ``NAME-3``... from them)."""
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self.conn.execute("SELECT name FROM runs WHERE name LIKE ? ESCAPE '\\'",
                                 (pattern,)).fetchall()
        # LIKE ignores ASCII case: the exact prefix is kept here.
        return {r[0] for r in rows if r[0].startswith(prefix)}

    def replace_queued_config(self, run_id: int, config: dict) -> bool:
        """A queued run's new config (and name, which the config carries); False if it left."""
        return bool(self.conn.execute(
            "UPDATE runs SET config = ?, name = ? WHERE id = ? AND status = ?",
            (_json(config), config.get("name"), run_id, QUEUED)).rowcount)

    # === resume (issue 26) ===================================================

    def requeue_ended(self, run_id: int, statuses: Iterable[str]) -> bool:
        """An ended run (in ``statuses``) back in the queue as itself, at its own place;
        False when it is not (any more) in one of them."""
        statuses = list(statuses)
        return bool(self.conn.execute(
            "UPDATE runs SET status = ?, ended = NULL, exit_reason = NULL, exit_code = NULL,"
            " cancel_requested = 0, pid = NULL, pid_start = NULL, job_name = NULL"
            f" WHERE id = ? AND status IN ({','.join('?' * len(statuses))})",
            (QUEUED, run_id, *statuses)).rowcount)

    # === restart (issue 14) ==================================================

    def restarts_of(self, run_id: int) -> list[int]:
        """Runs restarted from ``run_id`` (``rngdctl restart``), oldest first."""
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM runs WHERE restart_of = ? ORDER BY id", (run_id,)).fetchall()]

    def failed_not_restarted(self, statuses: Iterable[str]) -> list[dict]:
        """Ended runs in ``statuses`` that no run was restarted from yet, oldest first."""
        statuses = list(statuses)
        return self._rows(
            f"SELECT * FROM runs r WHERE status IN ({','.join('?' * len(statuses))})"
            " AND NOT EXISTS (SELECT 1 FROM runs n WHERE n.restart_of = r.id) ORDER BY id",
            statuses)

    # === retry evidence (issue 14, daemon/launchers/retry.py) ===========================

    def image_pulled_before(self, image: str, *, default_image: str | None = None
                            ) -> float | None:
        """When a pod of ours last ran ``image`` (a run with a digest) or pulled it (a pre-pull).

        ``default_image``: the image of runs whose config names none.
        """
        ran = self.conn.execute(
            "SELECT MAX(COALESCE(started, created)) FROM runs WHERE image_digest IS NOT NULL"
            " AND COALESCE(json_extract(config, '$.image'), ?) = ?",
            (default_image, image)).fetchone()[0]
        pulled = self.conn.execute(
            "SELECT MAX(time) FROM events WHERE kind = 'prepull'"
            " AND json_extract(data, '$.pulled') = ?", (image,)).fetchone()[0]
        times = [t for t in (ran, pulled) if t is not None]
        return max(times) if times else None

    # === estimates (issue 14) ================================================

    def queued_without_estimate(self) -> set[int]:
        rows = self.conn.execute(
            "SELECT id FROM runs WHERE status = ? AND id NOT IN (SELECT run_id FROM estimates)",
            (QUEUED,)).fetchall()
        return {r[0] for r in rows}

    def add_estimates(self, rows: list[tuple]) -> None:
        """Keep queued runs' first estimates: (run id, made, position, start, end, basis)
        each, in one transaction; a run that has an estimate keeps it (a later one is
        ignored)."""
        if rows:
            with self._transaction():
                self.conn.executemany(
                    "INSERT OR IGNORE INTO estimates (run_id, made, position, start, end, basis)"
                    " VALUES (?, ?, ?, ?, ?, ?)", rows)

    def estimate(self, run_id: int) -> dict | None:
        rows = self._rows("SELECT * FROM estimates WHERE run_id = ?", [run_id])
        return rows[0] if rows else None

    def estimates(self) -> list[dict]:
        """Every stored estimate with its run's status, oldest run first."""
        return self._rows("SELECT e.*, r.status, r.started, r.ended FROM estimates e"
                          " JOIN runs r ON r.id = e.run_id ORDER BY e.run_id")

    def _settle_estimate(self, run_id: int) -> None:
        # estimated - actual, in seconds: positive when the run started or ended earlier
        # than estimated. A run that never started keeps no start or end error.
        self.conn.execute(
            "UPDATE estimates SET"
            " start_error = start - (SELECT started FROM runs WHERE id = ?),"
            " end_error = end - (SELECT ended FROM runs WHERE id = ?)"
            " WHERE run_id = ? AND (SELECT started FROM runs WHERE id = ?) IS NOT NULL",
            (run_id, run_id, run_id, run_id))

    # === what the queue's estimates rest on (issue 13) =======================

    def estimate_inputs(self, steps_cap: int) -> tuple:
        """A cheap fingerprint of what ``estimate.queue_estimates`` can newly answer from.

        The queued and active runs as stored (config text, not decoded), the finished runs'
        count and newest end, and each active run's passes: their step count capped at
        ``steps_cap`` and whether they have a steady step. Past the warm-up a further step
        moves an estimate but cannot make one possible.
        """
        finished = ",".join("?" * len(FINISHED))
        runs = self.conn.execute(
            "SELECT id, status, held, priority, position, after_run, config, started FROM runs"
            f" WHERE status NOT IN ({finished}) ORDER BY id", FINISHED).fetchall()
        ended = self.conn.execute(
            f"SELECT COUNT(*), MAX(id), MAX(ended) FROM runs WHERE status IN ({finished})",
            FINISHED).fetchone()
        passes = self.conn.execute(
            "SELECT p.run_id, p.config_label, MIN(p.steps, ?), p.steady > 0"
            " FROM pass_totals p JOIN runs r ON r.id = p.run_id"
            f" WHERE r.status NOT IN ({finished}) ORDER BY p.run_id, p.config_label",
            (steps_cap, *FINISHED)).fetchall()
        return tuple(runs), tuple(ended), tuple(passes)
