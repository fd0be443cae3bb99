"""A run's cards in `show` and the note: each card's temperature, power and utilization range
beside the host load, and a throttled card said next to the step times it explains."""

from __future__ import annotations

import csv
import json

from recorded import T0, drifting_steps

from rngdctl.export import write_note


def _card_readings(store, run_id):
    for i, (temp, power, util, throttle) in enumerate([
            (55.0, 90.0, 0.40, []), (61.5, 120.0, 0.80, ["ThermalSlowdown"]),
            (60.0, 110.0, 0.75, ["ThermalSlowdown", "Idle"]), (58.0, 100.0, 0.12, [])]):
        store.add_card_samples([{
            "run_id": run_id, "card": "npu1", "uuid": "u1", "alive": True, "temp_c": temp,
            "power_w": power, "power_limit_w": 180.0, "util": util, "memory_used": 4 << 30,
            "memory_total": 47 << 30, "cores_occupied": 8, "throttle": throttle,
            "throttled": bool(throttle)}], now=T0 + 60 + 10 * i)


def test_the_note_gives_each_cards_ranges_and_says_it_throttled_beside_the_step_times(
        store, recorded, tmp_path):
    run_id = recorded(drifting_steps())
    _card_readings(store, run_id)
    note = write_note(store, [run_id], tmp_path / "experiments", now=T0)
    text = note.read_text()
    assert ("Host load was 1.5–3.0. Cards (furiosa-smi): npu1 55.0–61.5 °C, 90–120 W, "
            "12–80 % busy.") in text
    timing = text.index("- Step 6–60 median")
    throttled = text.index("- **npu1 throttled (thermal slowdown) in 2 of 4 readings, "
                           "+1m00s to +1m10s**: the step times of that stretch are the "
                           "throttled card's.")
    assert throttled > timing and "\n| steps |" not in text[timing:throttled]
    data = note.parent / "data" / note.stem.split("-", 3)[-1]
    rows = list(csv.DictReader((data / "card-samples.csv").open()))
    assert [(r["card"], r["temp_c"], r["throttled"]) for r in rows] == [
        ("npu1", "55.0", "0"), ("npu1", "61.5", "1"), ("npu1", "60.0", "1"),
        ("npu1", "58.0", "0")]
    assert json.loads(rows[2]["throttle"]) == ["ThermalSlowdown", "Idle"]


def test_a_run_that_held_no_card_has_no_card_line(store, recorded, tmp_path):
    text = write_note(store, [recorded(drifting_steps())], tmp_path / "experiments",
                      now=T0).read_text()
    assert "Cards (furiosa-smi)" not in text and "card-samples.csv" not in text


def test_show_gives_each_cards_ranges_and_when_it_throttled(store, recorded, rngdctl):
    run_id = recorded(drifting_steps())
    _card_readings(store, run_id)
    code, out, err = rngdctl("show", str(run_id))
    assert code == 0, err
    lines = out.splitlines()
    at = lines.index("  cards during the run (furiosa-smi):")
    assert lines[at - 1] == "  host load during the run: 1.5-3.0"
    assert lines[at + 1] == "    npu1 55.0–61.5 °C, 90–120 W, 12–80 % busy (4 readings)"
    assert lines[at + 2].startswith("    ! npu1 throttled (thermal slowdown) in 2 of 4 readings, ")
    code, out, _ = rngdctl("show", str(run_id), "--json")
    [card] = json.loads(out)["cards"]
    assert (card["temp_min"], card["temp_max"], card["throttled"]) == (55.0, 61.5, 2)
