"""The store's size after a simulated year of daemon ticks, with compaction.

Writes what the daemon writes (one host sample per 5 s tick, tagged with the
run that ran; one gate check per tick while a run waits) for ``--days``
simulated days into a fresh store, through ``Store.add_sample`` and
``Store.add_gate_check``, and lets ``daemon.store.compaction.Compactor`` run as the
daemon's tick does (at most hourly, a bounded batch, backlog sooner). The
simulated day: a run waits 2 h (blocked while the load is high, then passing),
then runs 6 h; the rest of the day the host idles. Steps are not written
(never compacted; they are the runs' own size).

Prints, at the end of the 30-day window and of the simulation: rows per table,
the database's bytes, the bytes per raw sample measured before any
compaction, what the year would take uncompacted, and the slowest compaction
call. Not a test: run it by hand.

    nice -n 5 .venv/bin/python bench/store_compaction.py [--days 365] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.home import DaemonConfig, Home
from daemon.store.compaction import DAY, Compactor

TICK = 5.0
START = 1_800_000_000.0
HOLDER = {"pid": 4121, "user": "kim", "cmdline": "python bench.py",
          "files": ["/dev/rngd/npu0pe0-3"], "started": START}


def gates(load: float, passed: bool) -> list[dict]:
    return [{"name": "host_load", "reading": load, "threshold": "< 150",
             "verdict": "pass" if passed else "fail", "detail": f"load {load:.2f}"},
            {"name": "device_idle", "reading": 0, "threshold": "0 holders", "verdict": "pass",
             "detail": "no process holds a device file"},
            {"name": "cards_free", "reading": None, "threshold": ">= 1", "verdict": "n/a",
             "detail": "local launcher"},
            {"name": "one_at_a_time", "reading": 0, "threshold": "0 active", "verdict": "pass",
             "detail": "nothing runs"}]


def simulate(store, days: int, report) -> dict:
    config = DaemonConfig()
    compactor = Compactor(store, full_resolution_days=config.full_resolution_days,
                          every=config.compact_every)
    slowest, calls, raw_bytes = 0.0, 0, None
    ticks_per_hour = int(3600 / TICK)
    run_id = 0
    for day in range(days):
        day_start = START + day * DAY
        run_id = store.add_run({"cards": 1, "resident": 0, "steps": 1000}, now=day_start)
        for hour in range(24):
            with store.batch():
                for k in range(ticks_per_hour):
                    t = day_start + hour * 3600 + k * TICK
                    load = 20.0 + (k % 97)  # 20-116 most of the time
                    waiting, running = hour < 2, 2 <= hour < 8
                    if waiting:
                        load = 200.0 - k * 0.1 if hour == 0 else 30.0 + k % 7
                        store.add_gate_check(run_id, gates(load, load < 150), load < 150, now=t)
                    store.add_sample(load=(load, load * 0.9, load * 0.8),
                                     holders=[HOLDER] if running and k % 60 == 0 else [],
                                     run_id=run_id if running else None, now=t)
            t0 = time.perf_counter()
            if compactor.maybe_run(day_start + (hour + 1) * 3600) is not None:
                calls += 1
                slowest = max(slowest, time.perf_counter() - t0)
        if day + 1 == 30:
            raw = store.table_rows()
            raw_bytes = store.size()["bytes"] / (raw["samples"] + raw["gate_checks"])
            report("after 30 days (the full-resolution window, nothing folded yet)", store)
    # Let the backlog finish as the daemon would over its next ticks.
    end = START + days * DAY
    while compactor.maybe_run(end) is not None and compactor.next_time <= end + 60:
        end = compactor.next_time
    return {"compaction_calls": calls, "slowest_compaction_s": round(slowest, 3),
            "bytes_per_raw_row": raw_bytes}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = {"days": args.days}

    def report(label, store):
        out[label] = {"rows": store.table_rows(), **store.size()}
        if not args.json:
            r = out[label]
            print(f"{label}: samples {r['rows']['samples']:,}, gate checks "
                  f"{r['rows']['gate_checks']:,}; {r['bytes'] / 1e6:.1f} MB "
                  f"({r['free_bytes'] / 1e6:.1f} MB of it free pages)")

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, Home(Path(tmp) / "home").ensure().store() as store:
        out.update(simulate(store, args.days, report))
        report(f"after {args.days} days", store)
    ticks = args.days * DAY / TICK
    out["raw_rows_uncompacted"] = int(ticks + args.days * 2 * 3600 / TICK)
    if out["bytes_per_raw_row"]:
        out["uncompacted_bytes_estimate"] = int(out["raw_rows_uncompacted"]
                                                * out["bytes_per_raw_row"])
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        if out.get("uncompacted_bytes_estimate"):
            print(f"uncompacted, the same {args.days} days: {out['raw_rows_uncompacted']:,} rows, "
                  f"about {out['uncompacted_bytes_estimate'] / 1e6:.0f} MB "
                  f"({out['bytes_per_raw_row']:.0f} bytes a row, measured at day 30)")
        print(f"{out['compaction_calls']} compactions, the slowest {out['slowest_compaction_s']} s;"
              f" {out['wall_s']} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
