"""The op report's time limit: each compile runs in a child that cannot stall the report.

No furiosa-torch needed: the jobs here stand in for a compile (trainer/backends/limits.py runs any
job); tests/furiosa compiles real ops through it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from trainer.backends import op_report
from trainer.backends.limits import in_child


def test_a_compile_past_its_limit_is_reported_timed_out_and_its_process_is_gone(tmp_path):
    pid_file = tmp_path / "pid"

    def slow_compile():
        pid_file.write_text(str(os.getpid()))
        time.sleep(120)
        return "OK", ""

    assert in_child(slow_compile, 5) == ("TIMEOUT", "timed out after 5 s")
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_a_compile_that_raises_or_dies_is_an_error_in_one_line_not_a_crash_of_the_report():
    def raises():
        raise RuntimeError("compiler panicked\nat tactic.rs:1096")

    assert in_child(raises, 60) == ("ERROR", "RuntimeError: compiler panicked")

    def dies():
        os.kill(os.getpid(), signal.SIGKILL)

    assert in_child(dies, 60) == (
        "ERROR", "the compile's process ended without a verdict (killed by signal 9)")
    assert in_child(lambda: ("FAIL", "UnsupportedOpError: x"), 60) == (
        "FAIL", "UnsupportedOpError: x")


def test_a_timed_out_op_fails_the_report_and_says_so():
    graph = op_report.Graph("g", [op_report.OpRow("aten::mm", "forward", 7, "OK",
                                                  grad="furiosa", grad_status="TIMEOUT",
                                                  grad_why="timed out after 5 s")])
    assert graph.failing() == graph.rows
    text = op_report.render("tiny-llama", [graph], "2026.4.0", True, limit_s=5)
    assert "compile-probed, 5 s a compile at most" in text
    assert "| `aten::mm` | forward | 7 | OK | furiosa: TIMEOUT: timed out after 5 s |" in text
    assert "aten::mm (forward, its gradient, g: TIMEOUT)" in text
