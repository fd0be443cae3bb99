"""The connection every part of the store shares: opening and migrating the file,
transactions, rows read as dicts, the file's size."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from daemon.errors import StoreError, StoreVersionError
from daemon.store.codec import _decode
from daemon.store.schema import MIGRATIONS, SCHEMA_VERSION


def _prepare_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # a home made here is private
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)


class Connection:
    """One open SQLite connection to rngdctl.db, migrated to SCHEMA_VERSION."""

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

    # === schema version ======================================================

    def schema_version(self) -> int:
        has_meta = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
        if not has_meta:
            return 0
        row = self.conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row[0]) if row else 0

    @property
    def home_id(self) -> str:
        """The home's random id (made with the store): with a run id, it names who owns a
        run's output folder (trainer/ownership.py)."""
        if getattr(self, "_home_id", None) is None:
            row = self.conn.execute("SELECT value FROM meta WHERE key = 'home_id'").fetchone()
            self._home_id = str(row[0])
        return self._home_id

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

    # === transactions and rows ===============================================

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

    @contextmanager
    def _snapshot(self):
        """One read transaction (WAL: each read in it sees the same commit, whatever is
        committed meanwhile); within an open transaction, that one."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def batch(self):
        """One transaction around many writes (the compaction benchmark's simulated ticks)."""
        return self._transaction()

    def _rows(self, sql: str, params: Iterable = ()) -> list[dict]:
        cursor = self.conn.execute(sql, tuple(params))
        names = [d[0] for d in cursor.description]
        return [_decode(dict(zip(names, row))) for row in cursor.fetchall()]

    def _iter_rows(self, sql: str, params: Iterable = (), batch: int = 1000):
        cursor = self.conn.execute(sql, tuple(params))
        names = [d[0] for d in cursor.description]
        while rows := cursor.fetchmany(batch):
            for row in rows:
                yield _decode(dict(zip(names, row)))

    # === the file ============================================================

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
