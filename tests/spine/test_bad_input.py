"""Bad input: one line on stderr, exit 2, no traceback, nothing stored.

A sample of bench/cli_bad_input.py's cases through the real CLI in a
subprocess (the script runs all of them); the placement rule that `submit`,
`model` and the trainer share; run references that are no run.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
from cli_bad_input import CASES

SAMPLE = [
    ["submit"],
    ["submit", "--cards", "x", "--resident", "0"],
    ["move", "1", "0"],
    ["frobnicate"],
    ["runs", "--bogus"],
    ["show", "99999999999999999999"],
    ["cancel", "18446744073709551616"],
    ["show", "²"],
    ["show", "\udcff"],
    ["submit", "--cards", "5", "--resident", "0"],
    ["submit", "--cards", "2", "--resident", "8", "--steps", "200", "--baseline"],
    ["submit", "--cards", "1", "--resident", "0", "--steps", "99999999999999999999"],
]


def test_the_sample_is_drawn_from_the_benchmark_cases():
    assert all((args, 2) in CASES for args in SAMPLE[:-2])
    assert len(CASES) >= 70


@pytest.mark.parametrize("args", SAMPLE, ids=lambda a: " ".join(a)[:40])
def test_bad_input_is_one_stderr_line_and_exit_2(rngdctl, args):
    code, out, err = rngdctl(*args)
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("Error: ") and "Traceback" not in err
    assert out == ""
    # Nothing was queued by a refused submit.
    assert json.loads(rngdctl("runs", "--json")[1]) == []


def test_a_usage_error_names_the_problem_and_where_the_help_is(rngdctl):
    code, _, err = rngdctl("submit", "--resident", "1")
    assert (code, err) == (2, ("Error: Missing option '--cards'. "
                               "(see 'rngdctl submit --help')\n"))


def test_a_home_that_is_a_file_is_one_line(rngdctl, tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    code, _, err = rngdctl("runs", "--home", str(afile))
    assert code == 2 and len(err.splitlines()) == 1 and "is a file" in err


def test_help_is_still_the_full_usage_on_stdout(rngdctl):
    code, out, err = rngdctl("submit", "--help")
    assert (code, err) == (0, "")
    assert out.startswith("Usage: rngdctl submit [OPTIONS]") and "--resident" in out


@pytest.mark.parametrize("ref", ["99999999999999999999", "18446744073709551616",
                                 "9223372036854775808", "²", "٣", "\udcff", 2 ** 64])
def test_a_run_reference_that_cannot_be_an_id_is_no_run(store, ref):
    from daemon.errors import NoSuchRun

    store.add_run({"cards": 1, "resident": 0, "steps": 1})
    with pytest.raises(NoSuchRun):
        store.run(ref)


def test_a_superscript_is_looked_up_as_a_name_not_as_an_id(store):
    store.add_run({"cards": 1, "resident": 0, "steps": 1})
    named = store.add_run({"cards": 1, "resident": 0, "steps": 1}, name="²")
    assert store.run("²")["id"] == named


# === One placement rule for submit, model and the trainer ====================

GRID = [(layers, cards, resident) for layers in (1, 4, 5, 8) for cards in range(1, 7)
        for resident in range(6)]


def _refused(fn, *args, **kwargs) -> str | None:
    """What ``fn`` says when it refuses (BadInput or the trainer's UsageError), else None."""
    from daemon.errors import BadInput
    from trainer.errors import UsageError

    try:
        fn(*args, **kwargs)
    except (BadInput, UsageError) as exc:
        return str(exc)
    return None


def test_submit_model_and_the_trainer_refuse_exactly_the_same_placements():
    from daemon.stepmodel import Shape
    from trainer.engine.layer_engine import Placement

    refused = 0
    for layers, cards, resident in GRID:
        by_model = _refused(Shape, layers=layers, cards=cards, resident_per_card=resident)
        by_trainer = _refused(Placement.plan, layers, cards, resident, tied=False)
        assert by_model == by_trainer, (layers, cards, resident)
        refused += by_model is not None
    assert 0 < refused < len(GRID)


@pytest.mark.parametrize("cards,resident,ok", [(5, 0, False), (4, 1, True), (2, 2, True),
                                               (2, 3, False), (1, 4, True), (1, 5, False)])
def test_submit_refuses_what_model_refuses_for_tiny_llama(cards, resident, ok):
    from daemon.errors import BadInput
    from daemon.run.spec import validate
    from daemon.stepmodel import Shape

    by_submit = _refused(validate, {"cards": cards, "resident": resident})
    by_model = _refused(Shape, layers=4, cards=cards, resident_per_card=resident)
    assert by_submit == by_model
    assert (by_submit is None) == ok
    if not ok:
        with pytest.raises(BadInput):
            validate({"cards": cards, "resident": resident})


def test_the_trainer_refuses_more_resident_layers_than_a_block_before_any_step(trainer_cli_run):
    proc = trainer_cli_run("--backend", "cpu,cpu", "--resident-layers", "3")
    assert proc.returncode == 2
    assert "3 resident layers per card is more than the 2 layers a card holds" in proc.stderr
    # Refused before the first record: no pass started, so nothing ran clamped.
    assert '"kind":"start"' not in proc.stdout and '"kind":"step"' not in proc.stdout


@pytest.fixture
def trainer_cli_run(tmp_path):
    import os
    import subprocess

    def run(*args):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        return subprocess.run(
            [sys.executable, "-m", "trainer", "train", "--run-id", "r1", "--model", "tiny-llama",
             "--full", "--steps", "2", "--seq-len", "16", "--accum", "1", "--data", "synthetic",
             *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
            check=False)

    return run
