"""furiosa-smi card readings: its box tables parsed, and a clear note without it."""

from __future__ import annotations

import os
import stat

from smi_fakes import INFO, fake_binding, fake_smi

from daemon.smi import parse_table, read_cards


def test_a_box_table_gives_one_row_per_card_by_header():
    rows = parse_table(INFO)
    assert [r["device"] for r in rows] == ["npu0", "npu1"]
    assert rows[1]["temp."] == "41.34°C"


def test_cards_are_read_from_a_real_furiosa_smi_process(tmp_path):
    cards, note = read_cards(str(fake_smi(tmp_path)))
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


def _binding(tmp_path, hang=False):
    return {**os.environ, "PYTHONPATH": str(fake_binding(tmp_path, hang=hang))}


def _smi(tmp_path):
    return str(fake_smi(tmp_path))


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
