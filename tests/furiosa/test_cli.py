"""Acceptance: ``python -m trainer train --backend furiosa:...`` on a host without a card."""

from __future__ import annotations

import json

import pytest

from tests.furiosa.conftest import release_path

pytestmark = pytest.mark.slow


def _one_line_and_the_end_record(done) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainer: error: ")
    records = [json.loads(line) for line in done.stdout.splitlines()]  # nothing but records
    end = records[-1]
    assert end["kind"] == "end" and end["status"] == "error"
    assert lines[0] == f"trainer: error: {end['error']}"
    return end["error"]


@pytest.mark.parametrize("spec", ["furiosa:0", "furiosa:auto"])
def test_a_furiosa_backend_without_a_card_exits_2_naming_the_missing_driver(python_in, spec):
    done = python_in("-m", "trainer", "train", "--steps", "2", "--backend", spec)
    error = _one_line_and_the_end_record(done)
    assert error.startswith(f"backend {spec}: no RNGD card or driver on this host")
    assert "librenegade.so" in error


def test_furiosa_torch_2026_2_uses_its_rngd_device_and_fails_the_same_way(python_in):
    older = release_path("furiosa-torch==2026.2.0")
    if not older.is_dir():
        pytest.skip(f"furiosa-torch 2026.2.0 is not at {older}")
    shown = python_in("-c", "import trainer.furiosa_torch as f; "
                      "print(f.version(), f.device_type(), f.card_device(5))", first=older)
    assert shown.stdout.split() == ["2026.2.0", "rngd", "rngd:5"], shown.stderr
    done = python_in("-m", "trainer", "train", "--steps", "2", "--backend", "furiosa:0",
                     first=older)
    error = _one_line_and_the_end_record(done)
    assert error.startswith("backend furiosa:0: no RNGD card or driver on this host")
    assert "librenegade.so" in error  # 2026.2 names it only in its native log: read from there
