"""The store: one SQLite file per home, and every query rngdctl makes.

This module owns the schema and all SQL. The daemon is the one writer of run
state; the CLI writes only new runs and requests (cancel, hold, move); the TUI
only reads. WAL mode lets them all open the file at once.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from daemon.errors import NoSuchRun, StoreError, StoreVersionError
from trainer import records

SCHEMA_VERSION = 10

#: Run states. A run moves queued -> launching -> running -> one of FINISHED.
QUEUED, LAUNCHING, RUNNING = "queued", "launching", "running"
DONE, FAILED, OOM, TIMEOUT, CANCELLED = "done", "failed", "oom", "timeout", "cancelled"
ACTIVE = (LAUNCHING, RUNNING)
FINISHED = (DONE, FAILED, OOM, TIMEOUT, CANCELLED)
STATUSES = (QUEUED, *ACTIVE, *FINISHED)

_JSON_COLUMNS = {"config", "versions", "phases", "memory", "extra", "data", "gates", "holders"}


# === Schema ==================================================================

_V1 = [
    """CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)""",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        name TEXT,
        status TEXT NOT NULL,
        config TEXT NOT NULL,
        position INTEGER NOT NULL,
        held INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL,
        started REAL,
        ended REAL,
        exit_reason TEXT,
        exit_code INTEGER,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        launcher TEXT,
        pid INTEGER,
        pid_start REAL,
        log_path TEXT,
        log_offset INTEGER NOT NULL DEFAULT 0,
        malformed INTEGER NOT NULL DEFAULT 0,
        versions TEXT,
        git TEXT,
        host TEXT
    )""",
    """CREATE TABLE passes (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        config_label TEXT NOT NULL,
        config TEXT NOT NULL,
        time REAL,
        PRIMARY KEY (run_id, config_label)
    )""",
    """CREATE TABLE steps (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        config_label TEXT NOT NULL,
        step INTEGER NOT NULL,
        loss REAL,
        loss_flag TEXT,
        step_s REAL NOT NULL,
        tokens INTEGER NOT NULL,
        lr REAL,
        phases TEXT,
        memory TEXT,
        extra TEXT,
        time REAL,
        UNIQUE (run_id, config_label, step)
    )""",
    """CREATE TABLE samples (
        id INTEGER PRIMARY KEY,
        time REAL NOT NULL,
        run_id INTEGER,
        load1 REAL, load5 REAL, load15 REAL,
        holders TEXT,
        holder_count INTEGER,
        cards_free INTEGER
    )""",
    """CREATE TABLE gate_checks (
        id INTEGER PRIMARY KEY,
        time REAL NOT NULL,
        run_id INTEGER,
        passed INTEGER NOT NULL,
        gates TEXT NOT NULL
    )""",
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY,
        time REAL NOT NULL,
        run_id INTEGER,
        kind TEXT NOT NULL,
        message TEXT NOT NULL,
        data TEXT
    )""",
    """CREATE INDEX samples_time ON samples(time)""",
    """CREATE INDEX gate_checks_run ON gate_checks(run_id, time)""",
    """CREATE INDEX events_run ON events(run_id, time)""",
]

# Version 2: what the Kubernetes launcher needs to follow and adopt a Job, and
# what the note reports about where a run ran; the daemon's heartbeat row.
_V2 = [
    "ALTER TABLE runs ADD COLUMN job_name TEXT",
    "ALTER TABLE runs ADD COLUMN node TEXT",
    "ALTER TABLE runs ADD COLUMN image_digest TEXT",
    "ALTER TABLE runs ADD COLUMN log_since TEXT",
    """CREATE TABLE daemon (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        pid INTEGER,
        launcher TEXT,
        node TEXT,
        home TEXT,
        started REAL,
        heartbeat REAL,
        stopped REAL,
        stop_reason TEXT
    )""",
]

# Version 3: what a launcher knows between ticks (an image missing, a pre-pull
# pod in progress, a compile's digest, ...), so a restart at any instant
# forgets nothing. One JSON value per key; run_id ties a fact to a run.
_V3 = [
    """CREATE TABLE launcher_state (
        key TEXT PRIMARY KEY,
        run_id INTEGER,
        value TEXT NOT NULL,
        time REAL NOT NULL
    )""",
]

# Version 4: the queue a researcher drives (issue 14): a run may wait for
# another to be done (--after, Slurm's afterok) and jump the queue (--priority);
# the first estimate of a queued run's start and end, and its error once the
# run has ended.
_V4 = [
    "ALTER TABLE runs ADD COLUMN after_run INTEGER REFERENCES runs(id)",
    "ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
    """CREATE TABLE estimates (
        run_id INTEGER PRIMARY KEY REFERENCES runs(id),
        made REAL NOT NULL,
        position INTEGER,
        start REAL,
        end REAL,
        basis TEXT,
        start_error REAL,
        end_error REAL
    )""",
]

# Version 5: when each card pod was first seen with no device file open, so a
# pod idle for longer than [gates] phantom_after is reported as a phantom even
# across daemon restarts (daemon/holders.py).
_V5 = [
    """CREATE TABLE idle_pods (
        node TEXT NOT NULL,
        pod TEXT NOT NULL,
        since REAL NOT NULL,
        PRIMARY KEY (node, pod)
    )""",
]

# Version 6: compaction (daemon/compaction.py). A samples row with ``n`` set stands
# for n samples of one minute (load1 their mean, load1_min/max their range); a
# gate_checks row with ``count`` set for a run of identical verdicts from
# ``time`` to ``last_time`` (load_min/max: the host-load readings' range). NULL:
# one raw row. The partial indexes find the raw rows to fold without walking
# the folded ones.
_V6 = [
    "ALTER TABLE samples ADD COLUMN n INTEGER",
    "ALTER TABLE samples ADD COLUMN load1_min REAL",
    "ALTER TABLE samples ADD COLUMN load1_max REAL",
    "ALTER TABLE gate_checks ADD COLUMN count INTEGER",
    "ALTER TABLE gate_checks ADD COLUMN last_time REAL",
    "ALTER TABLE gate_checks ADD COLUMN load_min REAL",
    "ALTER TABLE gate_checks ADD COLUMN load_max REAL",
    "CREATE INDEX samples_raw ON samples(time) WHERE n IS NULL",
    "CREATE INDEX gate_checks_raw ON gate_checks(time) WHERE count IS NULL",
]

# Version 7: reading a run costs the same whatever its length. The phases the
# step model needs as real columns (backfilled from the JSON), an index per
# column whose order statistics the stats need (steps 6-N only: partial), one
# for non-finite losses, and each pass's step counts kept at ingest.
STEADY_FIRST = 6  # stats.WARMUP_STEPS + 1; a literal in the partial indexes' WHERE
PHASE_COLUMNS = {p: f"phase_{p}" for p in records.PHASES}
#: Columns with an order-statistics index over steps 6-N, and the index's name.
STEADY_INDEXES = {"step_s": "steps_steady_step_s", "tokens": "steps_steady_tokens",
                  **{c: f"steps_steady_{c}" for c in PHASE_COLUMNS.values()}}


def _backfill_phases(conn: sqlite3.Connection) -> None:
    """The phase columns of steps stored before version 7, from their JSON (Python's reading)."""
    cursor = conn.execute("SELECT rowid, phases FROM steps WHERE phases IS NOT NULL")
    while rows := cursor.fetchmany(10_000):
        updates = []
        for rowid, text in rows:
            phases = json.loads(text) or {}
            updates.append((*(_phase_value(phases, p) for p in PHASE_COLUMNS), rowid))
        conn.executemany(
            f"UPDATE steps SET {', '.join(f'{c} = ?' for c in PHASE_COLUMNS.values())}"
            " WHERE rowid = ?", updates)


_V7 = [
    *(f"ALTER TABLE steps ADD COLUMN {c} REAL" for c in PHASE_COLUMNS.values()),
    _backfill_phases,
    *(f"CREATE INDEX {name} ON steps(run_id, config_label, {column}"
      f"{', step' if column == 'step_s' else ''}) WHERE step >= {STEADY_FIRST}"
      for column, name in STEADY_INDEXES.items()),
    "CREATE INDEX steps_nonfinite ON steps(run_id, config_label, step) WHERE loss IS NULL",
    """CREATE TABLE pass_totals (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        config_label TEXT NOT NULL,
        steps INTEGER NOT NULL,
        steady INTEGER NOT NULL,
        PRIMARY KEY (run_id, config_label)
    )""",
    f"""INSERT INTO pass_totals (run_id, config_label, steps, steady)
        SELECT run_id, config_label, COUNT(*), SUM(step >= {STEADY_FIRST})
        FROM steps GROUP BY run_id, config_label""",
]

# Version 8: the daemon's replicas under leader election (daemon/k8s/leader.py):
# each replica's role (leader or standby), who it saw holding the Lease and its
# own heartbeat, so that commands run beside a standby say so. The ``daemon``
# row stays the leader's.
_V8 = [
    """CREATE TABLE replicas (
        identity TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        leader TEXT,
        pid INTEGER,
        heartbeat REAL NOT NULL
    )""",
]

# Version 9 (issue 12): a finished run's numbers, sealed when it ends. Order
# statistics off an index still walk half of it (LIMIT/OFFSET), so a
# 1,000,000-step pass costs seconds of C; a run that has ended does not change,
# so the daemon computes its aggregates once (daemon/stats.py ``seal``) and
# every reader after it reads one row. ``steps``: the run's stored steps when
# sealed; a step stored since makes the row stale (``sealed_aggregates`` skips
# it). The samples of a run by run, for its load range and export.
_V9 = [
    """CREATE TABLE sealed_aggregates (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        name TEXT NOT NULL,
        steps INTEGER NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (run_id, name)
    )""",
    "CREATE INDEX samples_run ON samples(run_id, time)",
]

# Version 10: the queue, continued (issue 14): a run's own notifier command
# (``submit --notify``; NULL: the config's default, '': none), and the run an
# ended one was restarted from (``rngdctl restart``: a new run, the old one kept).
_V10 = [
    "ALTER TABLE runs ADD COLUMN notify TEXT",
    "ALTER TABLE runs ADD COLUMN restart_of INTEGER REFERENCES runs(id)",
]

MIGRATIONS = {1: _V1, 2: _V2, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _V7, 8: _V8, 9: _V9,
              10: _V10}

_INSERT_STEP = (
    "INSERT INTO steps (run_id, config_label, step, loss, loss_flag, step_s, tokens,"
    f" lr, phases, memory, extra, time, {', '.join(PHASE_COLUMNS.values())})"
    f" VALUES ({','.join('?' * (12 + len(PHASE_COLUMNS)))})"
    " ON CONFLICT (run_id, config_label, step) DO NOTHING")

#: A step row as readers get it (the phase columns repeat ``phases`` for the aggregates).
_STEP_ROW = ("run_id, config_label, step, loss, loss_flag, step_s, tokens, lr, phases, memory,"
             " extra, time")


def _prepare_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)


def _finite_or_none(x: float | None) -> float | None:
    # SQLite turns NaN into NULL silently; store a flag beside it instead.
    return x if x is None or math.isfinite(x) else None


def _loss_flag(x: float) -> str | None:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return None


def _phase_value(phases: dict, name: str) -> float | None:
    value = phases.get(name)
    return _finite_or_none(float(value)) if isinstance(value, (int, float)) else None


def _decode(row: dict) -> dict:
    for key in _JSON_COLUMNS & row.keys():
        if isinstance(row[key], str):
            row[key] = json.loads(row[key])
    if "loss_flag" in row and row.get("loss_flag"):
        row["loss"] = float(row["loss_flag"])
    return row


def _where(*clauses: tuple[str, Any]) -> tuple[str, list]:
    """`` WHERE a = ? AND b >= ?`` over the clauses whose value is given (not None), and
    their parameters: the optional filters of a read, written once."""
    given = [(clause, value) for clause, value in clauses if value is not None]
    where = " WHERE " + " AND ".join(clause for clause, _ in given) if given else ""
    return where, [value for _, value in given]


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _as_run_id(ref: int | str) -> int | None:
    """The run id ``ref`` spells, or None when it cannot be one.

    ASCII digits only (``str.isdigit`` also accepts "²"), and within SQLite's
    integer range: a larger number is no run's id, never an OverflowError.
    """
    if isinstance(ref, int):
        value = ref
    elif isinstance(ref, str) and ref.isascii() and ref.isdigit():
        value = int(ref)
    else:
        return None
    return value if 0 <= value < 2 ** 63 else None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class Store:
    """An open rngdctl.db. Cheap to open; open one per process."""

    def __init__(self, path: str | Path, *, timeout: float = 10.0):
        self.path = Path(path)
        try:
            _prepare_file(self.path)
            conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self.conn = conn
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the store {self.path}: {exc}") from None

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- schema version ------------------------------------------------------

    def schema_version(self) -> int:
        has_meta = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
        if not has_meta:
            return 0
        row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        with self._transaction():
            current = self.schema_version()
            if current > SCHEMA_VERSION:
                raise StoreVersionError(
                    f"{self.path} has schema version {current}, newer than this rngdctl "
                    f"understands ({SCHEMA_VERSION}); upgrade rngdctl or use another --home"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version]:
                    if callable(statement):  # a backfill that SQL cannot do alone
                        statement(self.conn)
                    else:
                        self.conn.execute(statement)
                self.conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(version),),
                )

    @contextmanager
    def _transaction(self):
        """BEGIN IMMEDIATE: take the write lock first, so a read-then-write cannot race."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _rows(self, sql: str, params: Iterable = ()) -> list[dict]:
        cursor = self.conn.execute(sql, tuple(params))
        names = [d[0] for d in cursor.description]
        return [_decode(dict(zip(names, row))) for row in cursor.fetchall()]

    # === runs ================================================================

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

    def queue(self, *, include_held: bool = True) -> list[dict]:
        """Queued runs in launch order: higher priority first, then by position."""
        sql = "SELECT * FROM runs WHERE status = ?"
        if not include_held:
            sql += " AND held = 0"
        return self._rows(sql + " ORDER BY priority DESC, position, id", [QUEUED])

    def head_of_queue(self) -> dict | None:
        """The first queued run that may launch: not held, and its --after run done."""
        rows = self._rows(
            "SELECT r.* FROM runs r LEFT JOIN runs d ON d.id = r.after_run"
            " WHERE r.status = ? AND r.held = 0 AND (r.after_run IS NULL OR d.status = ?)"
            " ORDER BY r.priority DESC, r.position, r.id LIMIT 1", [QUEUED, DONE])
        return rows[0] if rows else None

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

    def replace_queued_config(self, run_id: int, config: dict) -> bool:
        """A queued run's new config (and name, which the config carries); False if it left."""
        return bool(self.conn.execute(
            "UPDATE runs SET config = ?, name = ? WHERE id = ? AND status = ?",
            (_json(config), config.get("name"), run_id, QUEUED)).rowcount)

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

    # === retry evidence (issue 14, daemon/retry.py) ===========================

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

    def add_estimate(self, run_id: int, *, made: float, position: int, start: float,
                     end: float, basis: str) -> int:
        """Keep a queued run's first estimate (a later one is ignored); 1 if stored."""
        return self.conn.execute(
            "INSERT OR IGNORE INTO estimates (run_id, made, position, start, end, basis)"
            " VALUES (?, ?, ?, ?, ?, ?)", (run_id, made, position, start, end, basis)).rowcount

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
        in the same transaction.
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

    # === events ==============================================================

    def add_event(self, run_id: int | None, kind: str, message: str, *,
                  data: dict | None = None, now: float | None = None) -> None:
        # A NaN time would reach the NOT NULL column as NULL and fail the insert.
        when = now if now is not None and math.isfinite(now) else time.time()
        self.conn.execute(
            "INSERT INTO events (time, run_id, kind, message, data) VALUES (?,?,?,?,?)",
            (when, run_id, kind, message, _json(data)),
        )

    def add_event_once(self, run_id: int | None, kind: str, message: str, *,
                       data: dict | None = None, when: float | None = None) -> bool:
        """Store an event from the trainer unless the same one (time, kind, text) is stored."""
        found = self.conn.execute(
            "SELECT 1 FROM events WHERE run_id IS ? AND kind = ? AND message = ? AND "
            "(? IS NULL OR time = ?) LIMIT 1",
            (run_id, kind, message, when, when),
        ).fetchone()
        if found:
            return False
        self.add_event(run_id, kind, message, data=data, now=when)
        return True

    def count_malformed(self, run_id: int, n: int) -> None:
        self.conn.execute("UPDATE runs SET malformed = malformed + ? WHERE id = ?", (n, run_id))

    def events(self, *, run_id: int | None = None, limit: int | None = None,
               kinds: Iterable[str] | None = None) -> list[dict]:
        """Events, oldest first (the newest ``limit`` when given)."""
        sql, params = "SELECT * FROM events WHERE 1=1", []
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        if kinds is not None:
            kinds = list(kinds)
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params += kinds
        # By time: a folded row (compaction) has a newer id than the raw rows after it.
        sql += " ORDER BY time DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return list(reversed(self._rows(sql, params)))

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
    # One row per daemon replica (its identity: pod name/pid); see daemon/k8s/leader.py.

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

    # === tui =================================================================
    # Light reads for the TUI's refresh: plain tuples, no JSON decoding, so a
    # 100,000-step run can be followed incrementally every second.

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

    def last_step(self, run_id: int, config_label: str = records.MAIN) -> dict | None:
        """The newest step of one pass, decoded, or None."""
        rows = self._rows(
            f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ? AND config_label = ?"
            " ORDER BY step DESC LIMIT 1",
            [run_id, config_label],
        )
        return rows[0] if rows else None

    def blocked_since(self, run_id: int) -> float | None:
        """When the gates began failing for ``run_id`` without a pass since, or None."""
        row = self.conn.execute(
            "SELECT MIN(time) FROM gate_checks WHERE run_id = ? AND passed = 0 AND time > "
            "COALESCE((SELECT MAX(COALESCE(last_time, time)) FROM gate_checks"
            " WHERE run_id = ? AND passed = 1), -1)",
            (run_id, run_id),
        ).fetchone()
        return row[0] if row else None

    def latest_sample(self) -> dict | None:
        rows = self._rows("SELECT * FROM samples ORDER BY time DESC, id DESC LIMIT 1")
        return rows[0] if rows else None

    def load_series(self, *, since: float) -> list[tuple[float, float]]:
        """``(time, load1)`` of host samples since ``since``, oldest first."""
        return self.conn.execute(
            "SELECT time, load1 FROM samples WHERE time >= ? AND load1 IS NOT NULL ORDER BY time",
            (since,),
        ).fetchall()

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

    # === the events log ======================================================

    def event_log(self, *, run_id: int | None = None, since: float | None = None,
                  after_id: int | None = None, limit: int | None = None) -> list[dict]:
        """Stored events oldest first, daemon-level ones (no run) included.

        ``after_id`` gives only events stored after that one (``--follow``);
        ``limit`` keeps the newest that many.
        """
        where, params = _where(("run_id = ?", run_id), ("time >= ?", since),
                               ("id > ?", after_id))
        sql = f"SELECT * FROM events{where} ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return list(reversed(self._rows(sql, params)))

    def daemon_events(self, limit: int = 5) -> list[dict]:
        """The newest daemon-level events (no run: start, stop, tick failures, ...)."""
        return list(reversed(self._rows(
            "SELECT * FROM events WHERE run_id IS NULL ORDER BY id DESC LIMIT ?", (limit,))))

    # === tui: queue estimates and notifications (issue 14) ====================

    def stepped_seconds(self, run_id: int) -> float:
        """The sum of a run's step times over every pass (SQLite sums; no row is decoded)."""
        row = self.conn.execute("SELECT SUM(step_s) FROM steps WHERE run_id = ?",
                                (run_id,)).fetchone()
        return float(row[0] or 0.0)

    def last_event_id(self) -> int:
        """The newest event's id (0 when there is none): where a follower starts."""
        return self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()[0]

    def events_after(self, after_id: int, kinds: Iterable[str], limit: int = 100) -> list[dict]:
        """Events of ``kinds`` stored after the event ``after_id``, in the order stored."""
        kinds = list(kinds)
        return self._rows(
            f"SELECT * FROM events WHERE id > ? AND kind IN ({','.join('?' * len(kinds))})"
            " ORDER BY id LIMIT ?", [after_id, *kinds, limit])

    # === compaction (daemon/compaction.py folds; the SQL is here) =============

    def compact_samples(self, before: float, limit: int) -> tuple[int, bool]:
        """Fold raw samples older than ``before`` into per-minute rows, at most ``limit``.

        Returns (raw rows folded, whether more are left). A minute is never split
        between two calls: the batch ends at a minute's start.
        """
        from daemon import compaction

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
        from daemon import compaction

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

    def batch(self):
        """One transaction around many writes (the compaction benchmark's simulated ticks)."""
        return self._transaction()

    def size(self) -> dict[str, int]:
        """The database's bytes in use and free (pages a compaction freed, reused later)."""
        page = self.conn.execute("PRAGMA page_size").fetchone()[0]
        pages = self.conn.execute("PRAGMA page_count").fetchone()[0]
        free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
        return {"bytes": page * pages, "free_bytes": page * free}

    def table_rows(self) -> dict[str, int]:
        """Rows per table (the compaction benchmark's figure)."""
        tables = [r[0] for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: self.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}

    # === step aggregates =====================================================
    # What daemon.stats and daemon.stepmodel need from a pass, computed by
    # SQLite over the version-7 indexes: a pass of 1,000,000 steps costs a few
    # index walks in C, never a decoded row per step. "Steady" means steps
    # STEADY_FIRST-N (6-N).

    def pass_counts(self, run_id: int, config_label: str) -> tuple[int, int]:
        """(steps, steady steps) of one pass, as kept at ingest."""
        row = self.conn.execute(
            "SELECT steps, steady FROM pass_totals WHERE run_id = ? AND config_label = ?",
            (run_id, config_label)).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def _steady_from(self, column: str) -> str:
        if column not in STEADY_INDEXES:
            raise ValueError(f"no order statistics for the column {column!r}")
        return (f"FROM steps INDEXED BY {STEADY_INDEXES[column]} WHERE run_id = ? AND"
                f" config_label = ? AND step >= {STEADY_FIRST}")

    @staticmethod
    def _absent(column: str) -> tuple[str, str]:
        """SQL for a steady step that lacks ``column``, and for one that has it."""
        if column == "tokens":  # the step model counts a 0-token step as its shape's tokens
            return "tokens = 0", "tokens != 0"
        return f"{column} IS NULL", f"{column} IS NOT NULL"

    def steady_absent(self, run_id: int, config_label: str, column: str) -> int:
        """How many steady steps lack ``column`` (a phase column: NULL; tokens: 0)."""
        absent, _ = self._absent(column)
        return self.conn.execute(f"SELECT COUNT(*) {self._steady_from(column)} AND {absent}",
                                 (run_id, config_label)).fetchone()[0]

    def steady_sorted(self, run_id: int, config_label: str, column: str, offset: int,
                      count: int = 1, *, absent_as: float | None = None) -> list:
        """Values of ``column`` over the steady steps in ascending order, ``count`` of them
        from position ``offset`` (0-based): order statistics by walking the column's index.

        A step that lacks the column (``steady_absent``) takes the value ``absent_as``
        (0.0 for a phase, as stepmodel reads a missing phase) in the order.
        """
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

    def steps_until(self, run_id: int, config_label: str, last: int) -> list[dict]:
        """Steps of one pass numbered ``last`` or less, in order (as ``steps``)."""
        return self._rows(
            f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ? AND config_label = ? AND step <= ?"
            " ORDER BY step", [run_id, config_label, last])

    def step_span(self, run_id: int, config_label: str) -> tuple[int, int] | None:
        """The first and last step numbers of a pass, or None."""
        row = self.conn.execute(
            "SELECT MIN(step), MAX(step) FROM steps WHERE run_id = ? AND config_label = ?",
            (run_id, config_label)).fetchone()
        return None if row[0] is None else (row[0], row[1])

    def steady_span(self, run_id: int, config_label: str) -> tuple[int, int] | None:
        """The first and last steady step numbers, or None."""
        row = self.conn.execute(
            f"SELECT MIN(step), MAX(step) FROM steps WHERE run_id = ? AND config_label = ?"
            f" AND step >= {STEADY_FIRST}", (run_id, config_label)).fetchone()
        return None if row[0] is None else (row[0], row[1])

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

    # === the ingest floor ====================================================

    def insert_step_rows(self, rows: list[tuple]) -> None:
        """One executemany of ready step rows (add_steps' column order), nothing else:
        the floor bench/ingest.py measures ``Ingest.feed`` against."""
        with self._transaction():
            self.conn.executemany(_INSERT_STEP, rows)

    # === streaming reads =====================================================
    # For export: a run's steps and samples one at a time, in constant memory.

    def _iter_rows(self, sql: str, params: Iterable = (), batch: int = 1000):
        cursor = self.conn.execute(sql, tuple(params))
        names = [d[0] for d in cursor.description]
        while rows := cursor.fetchmany(batch):
            for row in rows:
                yield _decode(dict(zip(names, row)))

    def iter_steps(self, run_id: int, config_label: str = records.MAIN):
        """Steps of one pass in order, decoded one batch at a time (as ``steps``)."""
        return self._iter_rows(
            f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ? AND config_label = ? ORDER BY step",
            [run_id, config_label])

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

    # === bulk loading (issue 12) =============================================

    @contextmanager
    def bulk_load(self, cache_mb: int = 512):
        """A page cache of ``cache_mb`` while millions of steps are added (bench/scale.py):
        every index of the steps stays in memory, so a step costs no page reads. The
        connection's default after."""
        before = self.conn.execute("PRAGMA cache_size").fetchone()[0]
        self.conn.execute(f"PRAGMA cache_size = {-int(cache_mb) * 1024}")
        try:
            yield self
        finally:
            self.conn.execute(f"PRAGMA cache_size = {int(before)}")

    # === sealed aggregates (issue 12) ========================================
    # A finished run's numbers, computed once (daemon/stats.py ``seal``) and read
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

    def step_at(self, run_id: int, config_label: str, step: int) -> dict | None:
        """One step of a pass, decoded (as ``steps`` gives it), or None."""
        rows = self._rows(f"SELECT {_STEP_ROW} FROM steps WHERE run_id = ? AND config_label = ?"
                          " AND step = ?", [run_id, config_label, step])
        return rows[0] if rows else None

