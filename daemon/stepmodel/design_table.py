"""The step-model table kept in docs/design.md between marker comments."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import ModelFitError
from daemon.stepmodel.compare import Comparison, format_error, format_seconds

TABLE_BEGIN = "<!-- step-model-table:begin -->"
TABLE_END = "<!-- step-model-table:end -->"
TABLE_HEADER = ("| run | hardware | cards | resident | measured | model | error |\n"
                "| --- | --- | --- | --- | --- | --- | --- |")


@dataclass(frozen=True)
class DesignRow:
    """One measured config in the step-model table."""

    run: str
    hardware: str
    cards: int
    resident: int  # per card
    measured_s: float
    model_s: float
    error: float  # fraction

    def key(self) -> tuple:
        return (self.run, self.hardware, self.cards, self.resident)

    def markdown(self) -> str:
        return (f"| {self.run} | {self.hardware} | {self.cards} | {self.resident} | "
                f"{format_seconds(self.measured_s)} | {format_seconds(self.model_s)} | "
                f"{format_error(self.error)} |")


def design_row(comparison: Comparison, *, run: str, hardware: str) -> DesignRow:
    target = comparison.prediction.target
    return DesignRow(run, hardware, target.cards, target.resident_per_card,
                     comparison.measured_s, comparison.model_s, comparison.error)


_ROW = re.compile(r"^\|\s*(?P<run>[^|]*?)\s*\|\s*(?P<hw>[^|]*?)\s*\|\s*(?P<cards>\d+)\s*\|"
                  r"\s*(?P<res>\d+)\s*\|")


def _merge(lines: list[str], rows: Iterable[DesignRow]) -> list[str]:
    new = {r.key(): r.markdown() for r in rows}
    out = []
    for line in lines:
        m = _ROW.match(line)
        key = (m["run"], m["hw"], int(m["cards"]), int(m["res"])) if m else None
        if key in new:
            out.append(new.pop(key))
        elif m:
            out.append(line)
    return out + list(new.values())


def update_design_table(design_md_path: str | Path, rows: Iterable[DesignRow]) -> int:
    """Add ``rows`` to the step-model table between TABLE_BEGIN and TABLE_END in docs/design.md
    (a row with the same run, hardware, cards and resident replaces the old one; without the
    markers, the table ends the "## Step-time model" section, or the file); returns its row
    count."""
    path = Path(design_md_path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelFitError(f"cannot read {path}: {exc.strerror}") from None
    if TABLE_BEGIN in text and TABLE_END in text:
        head, rest = text.split(TABLE_BEGIN, 1)
        body, tail = rest.split(TABLE_END, 1)
    else:
        head, body, tail = _insertion_point(text)
    lines = _merge(body.strip().splitlines(), rows)
    block = f"{TABLE_BEGIN}\n{TABLE_HEADER}\n" + "".join(f"{line}\n" for line in lines) + TABLE_END
    try:
        path.write_text(head + block + tail, encoding="utf-8")
    except OSError as exc:
        raise ModelFitError(f"cannot write {path}: {exc.strerror}") from None
    return len(lines)


def _insertion_point(text: str) -> tuple[str, str, str]:
    m = re.search(r"^## Step-time model.*$", text, flags=re.MULTILINE)
    if not m:
        sep = "" if text.endswith("\n") or not text else "\n"
        return text + sep + "\n", "", "\n"
    nxt = re.search(r"^## ", text[m.end():], flags=re.MULTILINE)
    cut = m.end() + nxt.start() if nxt else len(text)
    before = text[:cut].rstrip("\n") + "\n\n"
    after = "\n\n" + text[cut:] if nxt else "\n"
    return before, "", after
