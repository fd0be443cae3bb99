"""The note's data folder: files that other tools can read back."""

from __future__ import annotations

import csv
import math

from recorded import T0, drifting_steps

from daemon.run.ingest import Ingest
from daemon.store import Store
from rngdctl.export import write_note
from trainer import records


def export_data(store, run, tmp_path):
    write_note(store, [run], tmp_path / "experiments", now=T0)
    return tmp_path / "experiments/data/r60"


def test_the_step_log_is_valid_under_the_contract(store, recorded, tmp_path):
    run = recorded(drifting_steps(), events=[("compile", "head graph compiled in 94 s")])
    lines = (export_data(store, run, tmp_path) / "r60.jsonl").read_text().splitlines()
    parsed = [records.parse_line(line) for line in lines]
    assert [type(p).__name__ for p in parsed].count("Step") == 60
    assert not [p for p in parsed if isinstance(p, (records.LogLine, records.Malformed))]
    assert isinstance(parsed[0], records.Start) and parsed[0].git == "b3cb03b"
    assert isinstance(parsed[-1], records.End) and parsed[-1].status == "ok"
    nan_step = next(p for p in parsed if isinstance(p, records.Step) and p.step == 30)
    assert math.isnan(nan_step.loss)


def test_the_step_log_ingests_into_a_fresh_store_with_the_same_steps(store, recorded, tmp_path):
    run = recorded(drifting_steps())
    lines = (export_data(store, run, tmp_path) / "r60.jsonl").read_text().splitlines()
    with Store(tmp_path / "again.db") as again:
        copy = again.add_run({}, name="copy")
        Ingest(again).feed(copy, lines)
        restored = again.steps(copy)
    original = store.steps(run)
    assert len(restored) == 60
    assert [(s["step"], s["step_s"], s["tokens"]) for s in restored] == [
        (s["step"], s["step_s"], s["tokens"]) for s in original]
    assert math.isnan(restored[29]["loss"]) and restored[0]["loss"] == 3.5


def test_gate_checks_host_load_and_events_are_readable_csv(store, recorded, tmp_path):
    run = recorded(drifting_steps(), loads=(1.5, 3.0, 2.25),
                   events=[("retry", "attempt 2, image, after ImagePullBackOff")])
    data = export_data(store, run, tmp_path)
    with (data / "gate-checks.csv").open(newline="") as f:
        gates = list(csv.DictReader(f))
    with (data / "host-load.csv").open(newline="") as f:
        loads = list(csv.DictReader(f))
    with (data / "events.csv").open(newline="") as f:
        events = list(csv.DictReader(f))
    assert len(gates) == 6  # two checks of three gates
    assert [g["verdict"] for g in gates if g["gate"] == "device_idle"] == ["fail", "pass"]
    assert [float(s["load1"]) for s in loads] == [1.5, 3.0, 2.25]
    assert events[-1]["message"] == "attempt 2, image, after ImagePullBackOff"
