"""Card readings from furiosa-smi, where it is installed: temperature, power, memory,
and each card's error counters.

The CLI's ``info`` and ``status`` subcommands print box tables (``| Arch |
Device | ... |``); there is no documented JSON form, so each table is read by
its header names and every cell is kept. Numbers that have a known unit
(°C, W, MiB/GiB) are also given as floats. Without furiosa-smi, or when it
fails or hangs (timeout), the reading is empty with the reason.

The error counters are not in the CLI's tables: they come from furiosa-smi's
Python binding (``furiosa_smi_py``, ``device.device_error_info()``: AXI and
PCIe post/fetch/discard/doorbell errors and device errors), read in a child
process with the same timeout, so a binding that hangs in the driver cannot
hang the agent. Without the binding the cards have no ``errors`` and the note
says why.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

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


# === error counters (furiosa_smi_py) ==========================================

#: The binding's DeviceErrorInfo counters (``<name>_error_count()``), in its order.
ERROR_COUNTERS = ("axi_post", "axi_fetch", "axi_discard", "axi_doorbell", "pcie_post",
                  "pcie_fetch", "pcie_discard", "pcie_doorbell", "device")

_ERRORS_SCRIPT = """
import json, sys
try:
    import furiosa_smi_py as smi
except ImportError as exc:
    print(json.dumps({"missing": str(exc)}))
    sys.exit(0)
if hasattr(smi, "init"):  # 2025.x and later want it before the first call
    smi.init()
out = {}
for device in smi.list_devices():
    info = device.device_error_info()
    name = str(device.device_info().name()).rsplit("/", 1)[-1]
    out[name] = {c: int(getattr(info, c + "_error_count")()) for c in sys.argv[1].split(",")}
print(json.dumps({"cards": out}))
"""


def read_errors(python: str | None = None, timeout: float = TIMEOUT,
                env: dict | None = None) -> tuple[dict[str, dict[str, int]], str | None]:
    """({card: {counter: count}}, None), or ({}, why there are no error counters)."""
    try:
        done = subprocess.run([python or sys.executable, "-c", _ERRORS_SCRIPT,
                               ",".join(ERROR_COUNTERS)], capture_output=True, text=True,
                              timeout=timeout, check=False, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        return {}, f"furiosa_smi_py took over {timeout:g} s: no error counters"
    except OSError as exc:
        return {}, f"cannot run python for furiosa_smi_py: {exc.strerror}"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return {}, f"furiosa_smi_py: {why[:120]}: no error counters"
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}, "furiosa_smi_py printed no reading: no error counters"
    if "missing" in answer:
        return {}, "furiosa_smi_py not installed: no error counters"
    return {str(k): v for k, v in (answer.get("cards") or {}).items() if isinstance(v, dict)}, None


def read_all(binary: str = "furiosa-smi", timeout: float = TIMEOUT,
             python: str | None = None, env: dict | None = None) -> tuple[list[dict], str | None]:
    """furiosa-smi's tables with each card's error counters (``errors``, ``errors_total``).

    The note names what is missing: the CLI's reading, the counters, or both.
    """
    cards, note = read_cards(binary, timeout)
    errors, errors_note = read_errors(python, timeout, env)
    by_name = {c["card"]: c for c in cards}
    for name, counts in sorted(errors.items()):
        card = by_name.get(name)
        if card is None:  # the binding sees a card the CLI did not list (or no CLI)
            card = by_name[name] = {"card": name, "raw": {}}
            cards.append(card)
        card["errors"] = counts
        card["errors_total"] = sum(int(v) for v in counts.values())
    notes = [n for n in (note, errors_note) if n]
    return cards, "; ".join(notes) or None
