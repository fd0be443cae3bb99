"""furiosa-smi card readings: its box tables parsed, and a clear note without it."""

from __future__ import annotations

import os
import stat

from daemon.smi import parse_table, read_cards

INFO = """\
+------+--------+---------------------+---------+---------+--------------+
| Arch | Device | Firmware            | Temp.   | Power   | PCI-BDF      |
+------+--------+---------------------+---------+---------+--------------+
| rngd | npu0   | 1.7.0, 4dfed1852e7b | 40.98°C | 38.40 W | 0000:03:00.0 |
+------+--------+---------------------+---------+---------+--------------+
| rngd | npu1   | 1.7.0, 4dfed1852e7b | 41.34°C | 37.44 W | 0000:04:00.0 |
+------+--------+---------------------+---------+---------+--------------+
"""


def test_a_box_table_gives_one_row_per_card_by_header():
    rows = parse_table(INFO)
    assert [r["device"] for r in rows] == ["npu0", "npu1"]
    assert rows[1]["temp."] == "41.34°C"


def test_cards_are_read_from_a_real_furiosa_smi_process(tmp_path):
    smi = tmp_path / "furiosa-smi"
    smi.write_text("#!/bin/sh\nif [ \"$1\" = info ]; then cat <<'X'\n" + INFO + "X\nfi\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    cards, note = read_cards(str(smi))
    assert note is None
    assert [(c["card"], c["temp_c"], c["power_w"]) for c in cards] == [
        ("npu0", 40.98, 38.4), ("npu1", 41.34, 37.44)]


def test_without_furiosa_smi_the_reading_is_empty_and_says_why(tmp_path):
    cards, note = read_cards(os.fspath(tmp_path / "no-such-smi"))
    assert cards == [] and "not found" in note


def test_a_failing_furiosa_smi_is_one_line_of_why(tmp_path):
    smi = tmp_path / "furiosa-smi"
    smi.write_text("#!/bin/sh\necho 'no device found' >&2\nexit 1\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    cards, note = read_cards(str(smi))
    assert cards == [] and note.endswith("info: no device found")


# === error counters (furiosa_smi_py, in a child process) =====================

FAKE_BINDING = '''
import time

COUNTS = {"npu0": 0, "npu1": 3}


class _Errors:
    def __init__(self, n):
        self.n = n

    def __getattr__(self, name):
        if not name.endswith("_error_count"):
            raise AttributeError(name)
        return lambda: self.n if name == "device_error_count" else 1


class _Info:
    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


class _Device:
    def __init__(self, name):
        self.name = name

    def device_info(self):
        return _Info(self.name)

    def device_error_info(self):
        return _Errors(COUNTS[self.name])


def init():
    pass


def list_devices():
    HANG
    return [_Device(n) for n in COUNTS]
'''


def _binding(tmp_path, hang=False):
    pkg = tmp_path / "site" / "furiosa_smi_py"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_BINDING.replace(
        "HANG", "time.sleep(60)" if hang else "pass"))
    return {**os.environ, "PYTHONPATH": str(tmp_path / "site")}


def _smi(tmp_path):
    smi = tmp_path / "furiosa-smi"
    smi.write_text("#!/bin/sh\nif [ \"$1\" = info ]; then cat <<'X'\n" + INFO + "X\nfi\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    return str(smi)


def test_each_cards_error_counters_come_from_the_binding_beside_the_cli_readings(tmp_path):
    from daemon.smi import ERROR_COUNTERS, read_all

    cards, note = read_all(_smi(tmp_path), env=_binding(tmp_path))
    assert note is None
    by_name = {c["card"]: c for c in cards}
    assert by_name["npu1"]["temp_c"] == 41.34
    assert by_name["npu1"]["errors"]["device"] == 3
    assert set(by_name["npu1"]["errors"]) == set(ERROR_COUNTERS)
    # 8 AXI/PCIe counters at 1 each, plus the device errors.
    assert (by_name["npu0"]["errors_total"], by_name["npu1"]["errors_total"]) == (8, 11)


def test_without_the_binding_the_cards_have_no_counters_and_the_note_says_so(tmp_path):
    from daemon.smi import read_all

    env = {**os.environ, "PYTHONPATH": str(tmp_path / "empty")}
    cards, note = read_all(_smi(tmp_path), env=env)
    assert [c["card"] for c in cards] == ["npu0", "npu1"]
    assert all("errors" not in c for c in cards)
    assert note == "furiosa_smi_py not installed: no error counters"


def test_a_binding_that_hangs_costs_one_timeout_not_the_agent(tmp_path):
    from daemon.smi import read_errors

    errors, note = read_errors(timeout=2.0, env=_binding(tmp_path, hang=True))
    assert errors == {} and note == "furiosa_smi_py took over 2 s: no error counters"
