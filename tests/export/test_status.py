"""experiments/STATUS.md and events.jsonl: one line per note, newest first; idempotent."""

from __future__ import annotations

import json

from click.testing import CliRunner
from recorded import drifting_steps
from test_note import baseline_run

from rngdctl.cli import cli


def invoke(home, *args):
    return CliRunner().invoke(cli, ["--home", str(home.path), "export", *args],
                              catch_exceptions=False)


def _table(out):
    return [line for line in (out / "STATUS.md").read_text().splitlines()
            if line.startswith("| 20")]


def test_export_keeps_a_status_line_and_an_events_record_per_note(home, recorded, tmp_path):
    run = recorded(drifting_steps())
    out = tmp_path / "experiments"
    result = invoke(home, str(run), "--out", str(out), "--json")
    assert result.exit_code == 0
    note = json.loads(result.output)["note"]
    [line] = _table(out)
    cells = [c.strip() for c in line.strip("|").split("|")]
    date, title, configs, median, tok_s, error, link = cells
    assert note.endswith(f"{date}-r60.md")
    assert title == "r60: 1 card × 2 resident layers, 60 steps" and configs == "1×2"
    assert median == "2.20 s" and tok_s != "–" and error == "–"  # no baseline: no model row to check
    assert link == f"[{date}-r60.md]({date}-r60.md)"
    [record] = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    assert record["runs"] == [run] and record["median_step_s"] == [2.2]
    assert record["note"] == f"{date}-r60.md"


def test_exporting_the_same_runs_twice_changes_neither_file(home, recorded, tmp_path):
    run = recorded(drifting_steps())
    out = tmp_path / "experiments"
    invoke(home, str(run), "--out", str(out))
    status, events = (out / "STATUS.md").read_bytes(), (out / "events.jsonl").read_bytes()
    second = invoke(home, str(run), "--out", str(out), "--json")
    assert json.loads(second.output)["status"]["appended"] is False
    assert (out / "STATUS.md").read_bytes() == status
    assert (out / "events.jsonl").read_bytes() == events


def test_the_newest_note_comes_first_with_its_model_error(home, recorded, tmp_path):
    first = recorded(drifting_steps(), name="drift")
    second = baseline_run(recorded)  # named r60
    out = tmp_path / "experiments"
    invoke(home, str(first), "--out", str(out))
    result = invoke(home, str(second), "--out", str(out), "--json")
    numbers = json.loads(result.output)["runs"][0]
    top, bottom = _table(out)
    assert top.split("|")[2].strip().startswith("r60")
    assert bottom.split("|")[2].strip().startswith("drift")
    error = next(r["error"] for r in numbers["step_model"] if r["error"] is not None)
    assert f"{error * 100:+.1f} %" in top
    records = (out / "events.jsonl").read_text().splitlines()
    assert [json.loads(r)["runs"] for r in records] == [[first], [second]]
