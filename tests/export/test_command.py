"""``rngdctl export``: the command prints where the note is; bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from recorded import drifting_steps
from test_note import baseline_run

from rngdctl.cli import cli


def invoke(home, *args):
    return CliRunner().invoke(cli, ["--home", str(home.path), "export", *args],
                              catch_exceptions=False)


def test_export_prints_the_note_and_data_paths(home, recorded, tmp_path):
    run = recorded(drifting_steps())
    result = invoke(home, str(run), "--out", str(tmp_path / "notes"))
    assert result.exit_code == 0
    note_line, data_line = result.output.splitlines()
    note = note_line.removeprefix("note: ")
    assert note.startswith(str(tmp_path / "notes")) and note.endswith("-r60.md")
    assert "Step 6–60 median: 2.20 s/step" in Path(note).read_text()
    assert data_line == f"data: {tmp_path / 'notes/data/r60'}"


def test_export_finds_a_run_by_name_and_writes_under_experiments_by_default(
        home, recorded, tmp_path, monkeypatch):
    recorded(drifting_steps(), name="r60")
    monkeypatch.chdir(tmp_path)
    result = invoke(home, "r60")
    assert result.exit_code == 0
    assert [p.name for p in (tmp_path / "experiments").glob("*.md")
            if p.name != "STATUS.md"] == [
        result.output.splitlines()[0].rsplit("/", 1)[1]]


def test_export_json_gives_the_paths_and_each_runs_numbers(home, recorded, tmp_path):
    run = recorded(drifting_steps())
    result = invoke(home, str(run), "--out", str(tmp_path), "--json")
    out = json.loads(result.output)
    assert out["data"] == str(tmp_path / "data/r60")
    [numbers] = out["runs"]
    assert numbers["median_step_s"] == 2.2 and numbers["median_step_s_6_25"] == 2.0
    assert numbers["nonfinite_losses"] == 1 and numbers["step1_loss"] == 3.5
    assert [row["first"] for row in numbers["loss_table"]] == [1, 26, 51]


def test_update_design_adds_the_runs_step_model_row(home, recorded, tmp_path, monkeypatch):
    run = baseline_run(recorded)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/design.md").write_text("# rngdctl design\n\n## Step-time model\n\nForm.\n")
    monkeypatch.chdir(tmp_path)
    result = invoke(home, str(run), "--update-design")
    assert result.output.splitlines()[-1] == "docs/design.md: 1 step-model row added or updated"
    design = (tmp_path / "docs/design.md").read_text()
    assert "| r60 | cpu (box) | 1 | 2 | 250.0 ms | 230.0 ms | -8.0 % |" in design


def test_update_design_without_a_design_file_is_refused_before_writing(home, recorded,
                                                                       tmp_path):
    run = recorded(drifting_steps())
    argv = [sys.executable, "-m", "rngdctl", "--home", str(home.path), "export", str(run),
            "--update-design"]
    proc = subprocess.run(argv, check=False, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == ("Error: --update-design: no docs/design.md here (run export from "
                           "the repository root)\n")
    assert not (tmp_path / "experiments").exists()


def test_an_unknown_run_is_one_line_on_stderr_and_exit_2(home, rngdctl):
    code, out, err = rngdctl("export", "no-such-run")
    assert (code, out, err) == (2, "", "Error: no run 'no-such-run'\n")


def test_export_without_a_run_is_a_usage_error(home, rngdctl):
    code, _, err = rngdctl("export")
    assert code == 2 and "Missing argument 'RUN...'" in err
