"""The host load's range over a run, from load samples or gate checks (raw or compacted)."""

from __future__ import annotations


def load_range(samples: list[dict]) -> tuple[float, float] | None:
    """The 1-minute load's range over samples, raw or folded by compaction (one row per
    minute keeps the minute's load1_min and load1_max beside its mean)."""
    lows = [s.get("load1_min", s["load1"]) if s.get("n") else s["load1"] for s in samples]
    highs = [s.get("load1_max", s["load1"]) if s.get("n") else s["load1"] for s in samples]
    lows, highs = [x for x in lows if x is not None], [x for x in highs if x is not None]
    return (min(lows), max(highs)) if lows else None


def gate_load_range(checks: list[dict]) -> tuple[float, float] | None:
    """The host-load readings' range over gate checks, raw or folded by compaction (a run
    of identical verdicts keeps its readings' load_min and load_max)."""
    lows, highs = [], []
    for c in checks:
        if c.get("count") and c.get("load_min") is not None:
            lows.append(c["load_min"])
            highs.append(c["load_max"])
            continue
        for g in c["gates"]:
            if g["name"] == "host_load" and g["reading"] is not None:
                lows.append(g["reading"])
                highs.append(g["reading"])
    return (min(lows), max(highs)) if lows else None
