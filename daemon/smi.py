"""Card readings from furiosa-smi, where it is installed: temperature, power, memory.

The CLI's ``info`` and ``status`` subcommands print box tables (``| Arch |
Device | ... |``); there is no documented JSON form, so each table is read by
its header names and every cell is kept. Numbers that have a known unit
(°C, W, MiB/GiB) are also given as floats. Without furiosa-smi, or when it
fails or hangs (timeout), the reading is empty with the reason.
"""

from __future__ import annotations

import re
import shutil
import subprocess

#: Seconds one furiosa-smi call may take.
TIMEOUT = 5.0
_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)")


def parse_table(text: str) -> list[dict[str, str]]:
    """Rows of a box table as {header (lower case): cell}; lines not in the box are ignored."""
    header: list[str] | None = None
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return rows


def _number(text: str | None) -> float | None:
    match = _NUMBER.search(text or "")
    return float(match.group(1)) if match else None


def _card(row: dict[str, str]) -> dict:
    out: dict = {"card": row.get("device") or row.get("npu") or "?", "raw": row}
    for key, cell in row.items():
        if key.startswith("temp"):
            out["temp_c"] = _number(cell)
        elif key.startswith("power"):
            out["power_w"] = _number(cell)
        elif "memory" in key or key.startswith("mem"):
            out["memory"] = cell
    return out


def read_cards(binary: str = "furiosa-smi", timeout: float = TIMEOUT) -> tuple[list[dict], str | None]:
    """(one dict per card, None) or ([], why there is no reading)."""
    path = shutil.which(binary)
    if path is None:
        return [], f"{binary} not found: no card readings"
    cards: dict[str, dict] = {}
    for sub in ("info", "status"):
        try:
            done = subprocess.run([path, sub], capture_output=True, text=True, timeout=timeout,
                                  check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return list(cards.values()), f"{binary} {sub} took over {timeout:g} s"
        except OSError as exc:
            return list(cards.values()), f"{binary} {sub}: {exc.strerror}"
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            return list(cards.values()), f"{binary} {sub}: {why[:120]}"
        for row in parse_table(done.stdout):
            card = _card(row)
            merged = cards.setdefault(card["card"], {"card": card["card"], "raw": {}})
            merged["raw"].update(card.pop("raw"))
            merged.update({k: v for k, v in card.items() if v is not None})
    return list(cards.values()), None
