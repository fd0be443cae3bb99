"""Small formatting shared by widgets and --snapshot: ages, numbers, times, glyphs, labels."""

from __future__ import annotations

import math
import time

from daemon.store import QUEUED


def _text(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def run_label(run: dict) -> str:
    return f"#{run['id']}" + (f" {run['name']}" if run.get("name") else "")


def ago(seconds: float | None) -> str:
    """A short age: 45 s, 14 m, 3 h 05 m, 2 d 4 h; an en dash when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} m"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} m"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def num(value: float | None, spec: str = ".3g", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:{spec}}{unit}"


def percent(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value * 100:+.1f} %"


def clock_time(t: float | None) -> str:
    if t is None:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


#: Run states by glyph and word, so that neither colour nor glyph alone carries them.
STATUS_GLYPHS = {
    QUEUED: "◷", "launching": "↑", "running": "▶", "done": "✓", "failed": "✗", "oom": "✗",
    "timeout": "⌛", "cancelled": "⊘",
}
VERDICT_GLYPHS = {"pass": "✓", "fail": "✗", "n/a": "–"}
DAEMON_GLYPHS = {"alive": "●", "down": "✗", "stopped": "○", "never": "○"}


def status_text(status: str, held: bool = False) -> str:
    if held:
        return "⏸ held"
    return f"{STATUS_GLYPHS.get(status, '?')} {status}"
