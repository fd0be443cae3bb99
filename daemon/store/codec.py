"""Values into and out of rows: JSON columns, non-finite losses, run references."""

from __future__ import annotations

import json
import math
from typing import Any

_JSON_COLUMNS = {"config", "versions", "phases", "memory", "extra", "data", "gates", "holders",
                 "throttle"}


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
    if value.__class__ is float:  # every phase a parsed record holds (records._phases)
        return value if math.isfinite(value) else None
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


#: ``json.dumps(value, ensure_ascii=False, sort_keys=True)``, the encoder built once:
#: dumps builds a new one per call when given options, three times a step at ingest.
_ENCODE = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode


def _json(value: Any) -> str | None:
    return None if value is None else _ENCODE(value)


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
