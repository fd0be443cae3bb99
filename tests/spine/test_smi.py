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
