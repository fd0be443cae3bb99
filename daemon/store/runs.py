"""Runs and their states: the queue's order, the launch claim, cancel, hold and move."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from daemon.errors import NoSuchRun
from daemon.store.codec import _JSON_COLUMNS, _as_run_id, _is_utf8, _json
from daemon.store.connection import Connection

#: Run states. A run moves queued -> launching -> running -> one of FINISHED.
QUEUED, LAUNCHING, RUNNING = "queued", "launching", "running"
DONE, FAILED, OOM, TIMEOUT, CANCELLED = "done", "failed", "oom", "timeout", "cancelled"
ACTIVE = (LAUNCHING, RUNNING)
FINISHED = (DONE, FAILED, OOM, TIMEOUT, CANCELLED)
STATUSES = (QUEUED, *ACTIVE, *FINISHED)


class Runs(Connection):
    """The runs table."""

    def add_run(self, config: dict, *, name: str | None = None, now: float | None = None,
                after: int | None = None, priority: int = 0, notify: str | None = None,
                restart_of: int | None = None) -> int:
        """Queue a run at the back of the queue (of its priority); returns its id."""
        now = time.time() if now is None else now
        with self._transaction():
            position = self.conn.execute(
                "SELECT COALESCE(MAX(position), 0) + 1 FROM runs"
            ).fetchone()[0]
            cursor = self.conn.execute(
                "INSERT INTO runs (name, status, config, position, created, after_run, priority,"
                " notify, restart_of) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (name, QUEUED, _json(config), position, now, after, priority, notify,
                 restart_of),
            )
        return int(cursor.lastrowid)

    def run(self, ref: int | str) -> dict:
        """A run by id, or by name (the newest of that name)."""
        rows: list[dict] = []
        run_id = _as_run_id(ref)
        if run_id is not None:
            rows = self._rows("SELECT * FROM runs WHERE id = ?", [run_id])
        if not rows and _is_utf8(str(ref)):  # a name from undecodable bytes names no run
            rows = self._rows("SELECT * FROM runs WHERE name = ? ORDER BY id DESC LIMIT 1",
                              [str(ref)])
        if not rows:
            raise NoSuchRun(f"no run {ref!r}")
        return rows[0]

    def runs(self, statuses: Iterable[str] | None = None, *, limit: int | None = None) -> list[dict]:
        """Runs, newest first."""
        sql = "SELECT * FROM runs"
        params: list = []
        if statuses is not None:
            statuses = list(statuses)
            sql += f" WHERE status IN ({','.join('?' * len(statuses))})"
            params += statuses
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return self._rows(sql, params)

    def runs_with_steps(self):
        """Runs with stored steps, newest first, read as the caller goes (a generator).

        Where a baseline can be: a queued run has no steps, so a long queue costs nothing.
        """
        return self._iter_rows(
            "SELECT * FROM runs WHERE id IN (SELECT run_id FROM pass_totals WHERE steps > 0)"
            " ORDER BY id DESC", batch=50)

    def queue(self, *, include_held: bool = True) -> list[dict]:
        """Queued runs in launch order: higher priority first, then by position."""
        sql = "SELECT * FROM runs WHERE status = ?"
        if not include_held:
            sql += " AND held = 0"
        return self._rows(sql + " ORDER BY priority DESC, position, id", [QUEUED])

    def queue_position(self, run_id: int) -> int | None:
        """A queued run's place in ``queue``'s order (1: the head), counted without reading
        the queue (a sweep's 10,000 queued runs, decoded, cost each `submit` 0.4 s); None
        when it is not queued."""
        return self.conn.execute(
            "SELECT COUNT(*) FROM runs r, runs q WHERE r.id = ? AND r.status = ?"
            " AND q.status = r.status AND (q.priority > r.priority OR (q.priority = r.priority"
            " AND (q.position < r.position OR (q.position = r.position AND q.id <= r.id))))",
            (run_id, QUEUED)).fetchone()[0] or None

    def queue_as_stored(self) -> list[tuple]:
        """What ``queue`` gives, undecoded (config as text): a cheap look at whether the queue
        changed, for a reader that keeps it decoded (the TUI reads it every second)."""
        return self.conn.execute(
            "SELECT id, held, priority, position, after_run, name, created, config FROM runs"
            " WHERE status = ? ORDER BY priority DESC, position, id", (QUEUED,)).fetchall()

    def head_of_queue(self) -> dict | None:
        """The first queued run that may launch: not held, and its --after run done."""
        rows = self._rows(
            "SELECT r.* FROM runs r LEFT JOIN runs d ON d.id = r.after_run"
            " WHERE r.status = ? AND r.held = 0 AND (r.after_run IS NULL OR d.status = ?)"
            " ORDER BY r.priority DESC, r.position, r.id LIMIT 1", [QUEUED, DONE])
        return rows[0] if rows else None

    def runs_sharing_output(self, folder: str, *, exclude: int | None = None) -> list[dict]:
        """Runs (id, name, status, out) whose ``--out`` is ``folder``, holds it or lies inside
        it, oldest first; ``exclude``: a run left out (one being edited). One query over
        the runs, whatever their number."""
        return self._rows(
            "SELECT id, name, status, out FROM (SELECT id, name, status,"
            " json_extract(config, '$.out') AS out FROM runs WHERE id IS NOT ?)"
            " WHERE out IS NOT NULL AND out != ''"
            " AND (out = ?2 OR substr(?2, 1, length(out) + 1) = out || '/'"
            " OR substr(out, 1, length(?2) + 1) = ?2 || '/') ORDER BY id",
            [exclude, folder])

    def active_runs(self) -> list[dict]:
        return self.runs(ACTIVE)

    def update_run(self, run_id: int, **fields: Any) -> None:
        if not fields:
            return
        values = [_json(v) if k in _JSON_COLUMNS else v for k, v in fields.items()]
        assignments = ", ".join(f"{k} = ?" for k in fields)
        self.conn.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*values, run_id))

    def claim_for_launch(self, run_id: int, *, launcher: str, node: str | None = None,
                         per_node: int = 1, now: float | None = None) -> bool:
        """queued -> launching, atomically, only where there is room; False when refused.

        ``node`` None: the whole host is one place, and any active run refuses
        the claim (one run at a time: the local launcher, one Kubernetes node).
        ``node`` named: refused while ``per_node`` runs are active on that node
        (an active run whose node is not known counts as on every node). Only a
        queued, unheld run is claimed, so a run is launched once per claim: a
        second claim of it (a second daemon, a stale reading) is refused. One
        write transaction: two claimers, in one process or two, cannot both win.
        The node is stored with the claim, so a restart knows where it went.
        """
        now = time.time() if now is None else now
        active = ",".join("?" * len(ACTIVE))
        with self._transaction():
            if node is None:
                busy = self.conn.execute(
                    f"SELECT COUNT(*) FROM runs WHERE status IN ({active})", ACTIVE,
                ).fetchone()[0] > 0
            else:
                busy = self.conn.execute(
                    f"SELECT COUNT(*) FROM runs WHERE status IN ({active})"
                    " AND (node = ? OR node IS NULL)", (*ACTIVE, node),
                ).fetchone()[0] >= max(1, per_node)
            changed = 0
            if not busy:
                changed = self.conn.execute(
                    "UPDATE runs SET status = ?, launcher = ?, started = ?, "
                    "attempts = attempts + 1, node = COALESCE(?, node)"
                    " WHERE id = ? AND status = ? AND held = 0",
                    (LAUNCHING, launcher, now, node, run_id, QUEUED),
                ).rowcount
        return bool(changed)

    def finish_run(self, run_id: int, status: str, *, reason: str | None = None,
                   exit_code: int | None = None, now: float | None = None) -> None:
        assert status in FINISHED, status
        from daemon import faults  # here: `submit` and `runs` never end a run

        faults.store_full()
        self.update_run(run_id, status=status, exit_reason=reason, exit_code=exit_code,
                        ended=time.time() if now is None else now)
        self._settle_estimate(run_id)

    def requeue(self, run_id: int) -> None:
        """Back to the head of the queue (after a rescued failure)."""
        self.update_run(run_id, status=QUEUED, pid=None, pid_start=None, job_name=None)

    def request_cancel(self, run_id: int, *, now: float | None = None) -> str:
        """Cancel a queued run at once; ask the daemon to stop an active one.

        Returns "cancelled", "requested", or "already <status>" for a run that ended.
        """
        now = time.time() if now is None else now
        changed = self.conn.execute(
            "UPDATE runs SET status = ?, ended = ?, exit_reason = ? WHERE id = ? AND status = ?",
            (CANCELLED, now, "cancelled while queued", run_id, QUEUED),
        ).rowcount
        if changed:
            self.add_event(run_id, "cancel", "cancelled while queued", now=now)
            return "cancelled"
        run = self.run(run_id)
        if run["status"] in ACTIVE:
            self.update_run(run_id, cancel_requested=1)
            self.add_event(run_id, "cancel", "cancel requested", now=now)
            return "requested"
        return f"already {run['status']}"

    def set_held(self, run_id: int, held: bool) -> None:
        self.update_run(run_id, held=int(held))

    def move(self, run_id: int, delta: int) -> None:
        """Move a queued run up (delta < 0) or down the queue by swapping positions."""
        queue = self.queue()
        ids = [r["id"] for r in queue]
        if run_id not in ids:
            return
        i = ids.index(run_id)
        j = max(0, min(len(ids) - 1, i + delta))
        if i == j:
            return
        ids.insert(j, ids.pop(i))
        positions = sorted(r["position"] for r in queue)
        with self._transaction():
            for rid, pos in zip(ids, positions):
                self.conn.execute("UPDATE runs SET position = ? WHERE id = ?", (pos, rid))

    def count_malformed(self, run_id: int, n: int) -> None:
        self.conn.execute("UPDATE runs SET malformed = malformed + ? WHERE id = ?", (n, run_id))
