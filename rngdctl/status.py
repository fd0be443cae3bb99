"""The status page and events log beside the notes: ``STATUS.md`` and ``events.jsonl``.

Each ``rngdctl export`` appends one record to ``<out>/events.jsonl`` (what
was exported: runs, title, configs, median step, tok/s, the step model's
error, the note) and rewrites ``<out>/STATUS.md`` from those records: one
line per note, newest first. Both are idempotent: a record whose numbers
equal the newest record of the same runs is not appended again, and
``STATUS.md`` is rewritten only when its text changes. So exporting the same
runs twice changes neither file (the note itself gets a suffixed copy, as
before).
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime
from pathlib import Path

from daemon.errors import BadInput
from rngdctl.units import rate, secs

EVENTS_NAME = "events.jsonl"
STATUS_NAME = "STATUS.md"
#: Version of an events.jsonl record.
RECORD_V = 1
#: The record's fields that say what the note found; equal fields = the same export.
_CONTENT = ("runs", "title", "configs", "median_step_s", "tokens_per_s", "model_error")


def _placement(config: dict) -> str:
    cards = config.get("cards", 1)
    resident = config.get("resident", config.get("resident_layers"))
    return f"{cards}×{resident}" if resident is not None else f"{cards} card(s)"


def _model_error(report: dict) -> float | None:
    """The step model's error for the run's own row (the first row that has one)."""
    for row in report.get("step_model") or []:
        if row.get("error") is not None:
            return row["error"]
    return None


def export_record(reports: list, note: Path, out_dir: Path, *, now: float) -> dict:
    """The events.jsonl record of one export (``reports``: the export's RunReports)."""
    numbers = [r.as_dict() for r in reports]
    title = _title(note)
    record = {
        "v": RECORD_V,
        "kind": "export",
        "time": now,
        "date": datetime.fromtimestamp(now).strftime("%Y-%m-%d"),
        "runs": [n["id"] for n in numbers],
        "title": title,
        "configs": [_placement(r.config) for r in reports],
        "median_step_s": [n["median_step_s"] for n in numbers],
        "tokens_per_s": [n["tokens_per_s"] for n in numbers],
        "model_error": [_model_error(n) for n in numbers],
        "note": os.path.relpath(note, out_dir),
    }
    record["key"] = _key(record)
    return record


def _title(note: Path) -> str:
    try:
        with note.open(encoding="utf-8") as f:
            first = f.readline().strip()
    except OSError:
        return note.stem
    return first[2:] if first.startswith("# ") else note.stem


def _key(record: dict) -> str:
    content = json.dumps({k: record.get(k) for k in _CONTENT}, sort_keys=True, default=str)
    return hashlib.sha256(content.encode()).hexdigest()[:16]


def read_records(out_dir: Path) -> list[dict]:
    """The records of events.jsonl, oldest first; a line that is not a record is skipped."""
    path = Path(out_dir) / EVENTS_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("kind") == "export":
            records.append(record)
    return records


def append_record(out_dir: Path, record: dict) -> bool:
    """Append ``record`` unless the newest record of the same runs says the same; True if new."""
    same_runs = [r for r in read_records(out_dir) if r.get("runs") == record["runs"]]
    if same_runs and same_runs[-1].get("key", _key(same_runs[-1])) == record["key"]:
        return False
    path = Path(out_dir) / EVENTS_NAME
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    except OSError as exc:
        raise BadInput(f"cannot append to {path}: {exc.strerror}") from None
    return True


def _each(values, show) -> str:
    return " / ".join(show(v) for v in values or []) or "–"


def _percent(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:+.1f} %"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def render_status(records: list[dict]) -> str:
    """STATUS.md: one line per note, newest first."""
    lines = [
        "# Status", "",
        ("One line per experiment note, newest first. Written by `rngdctl export` from "
         f"[{EVENTS_NAME}]({EVENTS_NAME}); do not edit by hand."), "",
        "| date | title | configs | median step | tok/s | model error | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in sorted(records, key=lambda r: r.get("time") or 0, reverse=True):
        note = r.get("note") or ""
        lines.append(
            f"| {r.get('date', '–')} | {_cell(r.get('title', ''))} | "
            f"{_cell(', '.join(r.get('configs') or []))} | "
            f"{_each(r.get('median_step_s'), secs)} | {_each(r.get('tokens_per_s'), rate)} | "
            f"{_each(r.get('model_error'), _percent)} | [{note}]({note}) |")
    return "\n".join(lines) + "\n"


def write_status(out_dir: Path) -> bool:
    """Rewrite STATUS.md from events.jsonl when its text changes; True if it was written."""
    path = Path(out_dir) / STATUS_NAME
    text = render_status(read_records(out_dir))
    try:
        if path.exists() and path.read_text(encoding="utf-8") == text:
            return False
        tmp = path.with_suffix(".md.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)  # a reader never sees half a page
    except OSError as exc:
        raise BadInput(f"cannot write {path}: {exc.strerror}") from None
    return True


def record_export(reports: list, note: Path, out_dir: Path, *, now: float) -> dict:
    """After a note is written: append its record (once) and refresh STATUS.md."""
    record = export_record(reports, note, Path(out_dir), now=now)
    appended = append_record(Path(out_dir), record)
    written = write_status(Path(out_dir))
    return {"events": str(Path(out_dir) / EVENTS_NAME), "appended": appended,
            "status": str(Path(out_dir) / STATUS_NAME), "status_written": written}
