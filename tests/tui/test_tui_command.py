"""`rngdctl tui` from the command line: --snapshot prints a frame; a bad --run is one line."""

from __future__ import annotations


def test_snapshot_prints_one_text_frame_and_exits(rngdctl, ids):
    code, out, err = rngdctl("tui", "--snapshot", "--run", "r60",
                             env={"COLUMNS": "120", "LINES": "40"})
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 40
    assert "[1] current run #1 r60" in lines[1]
    assert "step 60 of 60 (100%)" in out
    assert "[2] gates" in out and "[3] queue" in out


def test_an_unknown_run_is_one_line_and_exit_2(rngdctl, ids):
    code, out, err = rngdctl("tui", "--run", "nope")
    assert (code, out, err) == (2, "", "Error: no run 'nope'\n")
