"""bench/ingest_fuzz.py at a test's size: hostile lines through the real reader."""

import subprocess
import sys

from tests.conftest import REPO


def test_two_thousand_hostile_and_valid_lines_raise_nothing_and_are_all_accounted_for():
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "ingest_fuzz.py"), "--lines",
                           "2000", "--seed", "7"], capture_output=True, text=True, timeout=120,
                          cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "exceptions 0," in proc.stdout
    assert "FAIL" not in proc.stdout
