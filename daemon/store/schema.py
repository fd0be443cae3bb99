"""The store's schema: every table, as a list of migrations.

``MIGRATIONS[v]`` takes a store from version v - 1 to v (statements, or a
function of the connection for a backfill SQL cannot do alone). A schema
change is ONE new entry, the next version, with ``SCHEMA_VERSION`` set to it.
"""

from __future__ import annotations

import json
import sqlite3

from daemon.store.codec import _phase_value
from trainer import records

SCHEMA_VERSION = 15

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
# across daemon restarts (daemon/probes/holders.py).
_V5 = [
    """CREATE TABLE idle_pods (
        node TEXT NOT NULL,
        pod TEXT NOT NULL,
        since REAL NOT NULL,
        PRIMARY KEY (node, pod)
    )""",
]

# Version 6: compaction (daemon/store/compaction.py). A samples row with ``n`` set stands
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


def steady_from(column: str) -> str:
    """``FROM ... WHERE`` over one pass's steady steps (parameters: run id, pass), through
    the column's order-statistics index."""
    if column not in STEADY_INDEXES:
        raise ValueError(f"no order statistics for the column {column!r}")
    return (f"FROM steps INDEXED BY {STEADY_INDEXES[column]} WHERE run_id = ? AND"
            f" config_label = ? AND step >= {STEADY_FIRST}")


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

# Version 8: the daemon's replicas under leader election (daemon/launchers/k8s/leader.py):
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
# so the daemon computes its aggregates once (daemon/stepmodel/stats.py ``seal``) and
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

# Version 11 (issue 12): a running run's reads cost the same whatever its length.
# Order statistics off an index walk up to half of it (LIMIT/OFFSET) and a run
# that is still running cannot be sealed, so ingest keeps, per pass and column
# of order statistics, a few markers: a value, and how many steady steps hold a
# smaller value and how many a value no larger. A reader walks from the nearest
# marker, which ingest keeps at the ranks the medians and quartiles need
# (daemon/store/markers.py). Beside them: each pass's steady steps lacking a
# column (a NULL phase, 0 tokens), counted at ingest, and what the daemon keeps
# of a running pass between ingests (its plots, daemon/run/plots.py). ``value``
# has no type: a marker keeps the column's own (tokens stay integers).
_V11 = [
    """CREATE TABLE steady_absent (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        config_label TEXT NOT NULL,
        column_name TEXT NOT NULL,
        absent INTEGER NOT NULL,
        PRIMARY KEY (run_id, config_label, column_name)
    )""",
    *(f"""INSERT INTO steady_absent (run_id, config_label, column_name, absent)
        SELECT run_id, config_label, '{column}', SUM({column} {absent})
        FROM steps WHERE step >= {STEADY_FIRST} GROUP BY run_id, config_label"""
      for column, absent in (("tokens", "= 0"),
                             *((c, "IS NULL") for c in PHASE_COLUMNS.values()))),
    """CREATE TABLE order_markers (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        config_label TEXT NOT NULL,
        column_name TEXT NOT NULL,
        slot TEXT NOT NULL,
        value NOT NULL,
        below INTEGER NOT NULL,
        through INTEGER NOT NULL,
        steady INTEGER NOT NULL,
        PRIMARY KEY (run_id, config_label, column_name, slot)
    )""",
    """CREATE TABLE pass_state (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        config_label TEXT NOT NULL,
        name TEXT NOT NULL,
        steps INTEGER NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (run_id, config_label, name)
    )""",
]

# Version 12 (issue 26): the held-out loss. One row per eval record: a pass's loss over
# the whole held-out set after ``step`` optimizer steps (0: before the first). A
# non-finite loss is NULL with its flag beside it, as in ``steps``; ``perplexity`` is
# NULL where it is not finite. Unique per pass and step: a resumed trainer writes the
# evals after its checkpoint again, and the first copy is kept, as for steps.
_V12 = [
    """CREATE TABLE evals (
        run_id INTEGER NOT NULL REFERENCES runs(id),
        config_label TEXT NOT NULL,
        step INTEGER NOT NULL,
        loss REAL,
        loss_flag TEXT,
        perplexity REAL,
        tokens INTEGER NOT NULL,
        examples INTEGER NOT NULL,
        seconds REAL NOT NULL,
        time REAL,
        UNIQUE (run_id, config_label, step)
    )""",
]

# Version 13 (issue 27): each card's readings from furiosa-smi (daemon/probes/smi.py), one row
# per card per reading, every [daemon] card_sample_s; ``run_id`` the run that held the
# card then (NULL: none of ours). Folded by compaction like ``samples``: ``n`` set, one
# row per minute, run, node and card, the means in the value columns, the ranges in
# ``*_min``/``*_max``, ``throttled`` the readings that throttled (raw: 0 or 1),
# ``throttle`` every reason seen, ``alive`` 0 if any reading was not.
_V13 = [
    """CREATE TABLE card_samples (
        id INTEGER PRIMARY KEY,
        time REAL NOT NULL,
        run_id INTEGER,
        node TEXT,
        card TEXT NOT NULL,
        uuid TEXT,
        alive INTEGER,
        temp_c REAL, ambient_c REAL, power_w REAL, power_limit_w REAL, util REAL,
        memory_used INTEGER, memory_total INTEGER, cores_occupied INTEGER,
        throttle TEXT,
        throttled INTEGER NOT NULL DEFAULT 0,
        n INTEGER,
        temp_min REAL, temp_max REAL, power_min REAL, power_max REAL,
        util_min REAL, util_max REAL
    )""",
    "CREATE INDEX card_samples_time ON card_samples(time)",
    "CREATE INDEX card_samples_run ON card_samples(run_id, time)",
    "CREATE INDEX card_samples_raw ON card_samples(time) WHERE n IS NULL",
]



def _make_home_id(conn: sqlite3.Connection) -> None:
    """A random id for the home, made once: a run's output folder is claimed by its run id
    and this (trainer/ownership.py), so a run of another home, or of this home's store
    made again, is never taken for this one."""
    import secrets

    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('home_id', ?)",
                 (secrets.token_hex(8),))


# Version 14 (issues 33, 36): the home's id, in ``meta``; a new store gets it as it is made.
_V14 = [_make_home_id]

# Version 15 (issue 35): what each tracker (TensorBoard, MLflow: daemon/trackers/) was sent,
# so a restart, a tracker that was down or one set later goes on where it stood. A tracker is
# named by its key (``tensorboard:<folder>``, ``mlflow:<uri>``); ``trackers.since`` is when the
# daemon first followed it (older runs go by ``rngdctl export``). Per run: where it is there
# (``remote``: the MLflow run id), whether its config went in (``params``) and the ``ended``
# time of the end that went in (the run's own: a resumed run ends again). Per pass: the last
# step and eval sent, and for TensorBoard the event file and its bytes at that cursor (bytes
# past them were written but not counted: cut before the next write).
_V15 = [
    """CREATE TABLE trackers (
        tracker TEXT PRIMARY KEY,
        since REAL NOT NULL
    )""",
    """CREATE TABLE tracker_runs (
        tracker TEXT NOT NULL,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        remote TEXT,
        params INTEGER NOT NULL DEFAULT 0,
        ended REAL,
        PRIMARY KEY (tracker, run_id)
    )""",
    """CREATE TABLE tracker_passes (
        tracker TEXT NOT NULL,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        config_label TEXT NOT NULL,
        step INTEGER NOT NULL DEFAULT 0,
        eval_step INTEGER NOT NULL DEFAULT -1,
        file TEXT,
        size INTEGER,
        PRIMARY KEY (tracker, run_id, config_label)
    )""",
]

MIGRATIONS = {1: _V1, 2: _V2, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _V7, 8: _V8, 9: _V9,
              10: _V10, 11: _V11, 12: _V12, 13: _V13, 14: _V14, 15: _V15}
