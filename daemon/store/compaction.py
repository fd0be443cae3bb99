"""Store compaction: host samples and gate checks stay small for years.

The daemon stores a host sample every tick (17,280 a day at 5 s) and a gate
check every tick while a run waits. Past a window of full resolution
(``[daemon] full_resolution_days``, default 30):

- samples fold into one row per minute and run tag: ``load1`` the mean,
  ``load1_min``/``load1_max`` the range, ``n`` the samples folded, the 5- and
  15-minute loads the mean, the holders every distinct one seen, the holder
  count the most seen, the free cards the fewest;
- gate checks fold into runs of identical verdicts (per run: passed, and each
  gate's name and verdict): ``time`` the first check, ``last_time`` the last,
  ``count`` the checks, ``load_min``/``load_max`` the host-load readings' range
  (what a note's "load before the run" needs), ``gates`` the last check's.

Steps, passes, events and runs are never compacted. Readers treat a folded
row like a raw one with a range (``daemon/stepmodel/stats.py``); a raw row has ``n`` and
``count`` NULL.

The folding here is pure (lists of dicts in, rows out); ``Store`` selects,
writes and deletes in one transaction. ``Compactor`` is what the daemon's tick
calls: it does nothing until its next time (hourly), and each call folds a
bounded batch so that a tick never waits long; a full batch brings the next
call forward to work through a backlog (a store from before compaction).
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import statistics
from collections import defaultdict

log = logging.getLogger("rngdctl.daemon")

MINUTE = 60.0
DAY = 86400.0
#: Raw rows folded per call, per table: about 7 hours of 5 s samples, about
#: 0.3 s of one tick on a loaded host (bench/store_compaction.py measures it).
BATCH = 5_000
#: After a full batch the next call comes this soon, to work through a backlog.
BACKLOG_EVERY = 60.0


# === samples =================================================================


def fold_samples(rows: list[dict]) -> list[dict]:
    """One row per (minute, run tag) from raw samples (``holders`` decoded lists)."""
    groups: dict[tuple[float, int | None], list[dict]] = defaultdict(list)
    for row in rows:
        groups[(math.floor(row["time"] / MINUTE) * MINUTE, row["run_id"])].append(row)
    return [_fold_minute(minute, run_id, group)
            for (minute, run_id), group in sorted(groups.items(), key=_group_order)]


def _group_order(item) -> tuple:
    (minute, run_id), _ = item
    return (minute, -1 if run_id is None else run_id)


def _fold_minute(minute: float, run_id: int | None, group: list[dict]) -> dict:
    def mean(key: str) -> float | None:
        values = [r[key] for r in group if r[key] is not None]
        return statistics.fmean(values) if values else None

    loads = [r["load1"] for r in group if r["load1"] is not None]
    seen: dict[str, dict] = {}
    for r in group:
        for holder in r["holders"] or []:
            seen.setdefault(json.dumps(holder, sort_keys=True), holder)
    counts = [r["holder_count"] for r in group if r["holder_count"] is not None]
    free = [r["cards_free"] for r in group if r["cards_free"] is not None]
    return {
        "time": minute, "run_id": run_id, "n": len(group),
        "load1": mean("load1"), "load5": mean("load5"), "load15": mean("load15"),
        "load1_min": min(loads) if loads else None, "load1_max": max(loads) if loads else None,
        "holders": list(seen.values()), "holder_count": max(counts) if counts else None,
        "cards_free": min(free) if free else None,
    }


# === card readings ===========================================================

#: (value column, its range's columns) of a card reading.
CARD_RANGES = (("temp_c", "temp_min", "temp_max"), ("power_w", "power_min", "power_max"),
               ("util", "util_min", "util_max"))


def fold_card_samples(rows: list[dict]) -> list[dict]:
    """One row per (minute, run tag, node, card) from raw card readings (``throttle``
    decoded lists)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        minute = math.floor(row["time"] / MINUTE) * MINUTE
        groups[(minute, row["run_id"], row["node"], row["card"])].append(row)
    order = sorted(groups, key=lambda k: (k[0], -1 if k[1] is None else k[1], k[2] or "", k[3]))
    return [_fold_card_minute(key, groups[key]) for key in order]


def _fold_card_minute(key: tuple, group: list[dict]) -> dict:
    minute, run_id, node, card = key

    def values(name: str) -> list:
        return [r[name] for r in group if r[name] is not None]

    folded = {"time": minute, "run_id": run_id, "node": node, "card": card, "n": len(group),
              "uuid": group[-1]["uuid"], "power_limit_w": group[-1]["power_limit_w"],
              "throttled": sum(r["throttled"] or 0 for r in group)}
    alive = values("alive")
    folded["alive"] = min(alive) if alive else None
    for name in ("ambient_c", *(c for c, _, _ in CARD_RANGES)):
        v = values(name)
        folded[name] = statistics.fmean(v) if v else None
    for name, low, high in CARD_RANGES:
        v = values(name)
        folded[low], folded[high] = (min(v), max(v)) if v else (None, None)
    for name in ("memory_used", "memory_total", "cores_occupied"):
        v = values(name)
        folded[name] = max(v) if v else None
    folded["throttle"] = sorted({r for row in group for r in row["throttle"] or []})
    return folded


# === gate checks =============================================================


def signature(passed: bool, gates: list[dict]) -> tuple:
    """What makes two checks "identical": the outcome and each gate's verdict."""
    return (bool(passed), tuple((g.get("name"), g.get("verdict")) for g in gates))


def host_load(gates: list[dict]) -> float | None:
    for g in gates:
        if g.get("name") == "host_load" and isinstance(g.get("reading"), (int, float)):
            return float(g["reading"])
    return None


def fold_checks(rows: list[dict], previous: dict[int | None, dict]) -> tuple[list[dict],
                                                                              list[dict]]:
    """Runs of identical verdicts from raw checks (oldest first, ``gates`` decoded).

    ``previous[run_id]`` is that run's newest folded row before ``rows`` (or
    absent): a run of verdicts that goes on across two calls extends it rather
    than starting a new row. Returns (rows to update, rows to insert).
    """
    updates: dict[int, dict] = {}
    inserts: list[dict] = []
    current: dict[int | None, dict] = {k: dict(v) for k, v in previous.items() if v}
    for row in rows:
        run_id, sig = row["run_id"], signature(row["passed"], row["gates"])
        load = host_load(row["gates"])
        folded = current.get(run_id)
        if folded is not None and signature(folded["passed"], folded["gates"]) == sig:
            folded["last_time"] = row["time"]
            folded["count"] += 1
            folded["gates"] = row["gates"]
            if load is not None:
                folded["load_min"] = load if folded["load_min"] is None else min(
                    folded["load_min"], load)
                folded["load_max"] = load if folded["load_max"] is None else max(
                    folded["load_max"], load)
            if folded.get("id") is not None:
                updates[folded["id"]] = folded
            continue
        folded = {"id": None, "time": row["time"], "last_time": row["time"], "count": 1,
                  "run_id": run_id, "passed": bool(row["passed"]), "gates": row["gates"],
                  "load_min": load, "load_max": load}
        inserts.append(folded)
        current[run_id] = folded
    return list(updates.values()), inserts


# === the daemon's side =======================================================


class Compactor:
    """Called every tick; compacts at most once per ``every`` seconds, a batch at a time."""

    def __init__(self, store, *, full_resolution_days: float, every: float,
                 batch: int = BATCH):
        self.store = store
        self.window = full_resolution_days * DAY
        self.every = every
        self.batch = batch
        self.next_time = 0.0  # the first tick compacts (a restart may find a backlog)

    def maybe_run(self, now: float) -> int | None:
        """Rows folded, or None when it was not time yet (or the store failed)."""
        if now < self.next_time:
            return None
        before = now - self.window
        try:
            samples, more_samples = self.store.compact_samples(before, self.batch)
            checks, more_checks = self.store.compact_gate_checks(before, self.batch)
            cards, more_cards = self.store.compact_card_samples(before, self.batch)
        except sqlite3.Error as exc:  # compaction must never cost a tick
            log.warning("store compaction failed: %s", exc)
            self.next_time = now + self.every
            return None
        backlog = more_samples or more_checks or more_cards
        self.next_time = now + (min(BACKLOG_EVERY, self.every) if backlog else self.every)
        return samples + checks + cards
