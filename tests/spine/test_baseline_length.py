"""How long the baseline pass is when ``submit --baseline`` does not say.

The step model's error is read from the medians of steps 6-N of each pass:
a 10-step baseline left it 5 steps, and the error users saw was mostly the
host's noise. Interleaved (cpu) the baseline now runs beside the whole run,
up to 200 steps; one pass after the other (cards), up to 40.
"""

from __future__ import annotations

import pytest

from daemon.run.spec import baseline_steps, trainer_argv, validate


def baseline_argv(**options) -> str:
    config = validate({"cards": 1, "resident": 1, "baseline": True, **options})
    argv = trainer_argv({"id": 7, "config": config}, log_path=None, python="python")
    return argv[argv.index("--baseline-steps") + 1]


def test_on_cpu_the_baseline_runs_beside_the_whole_run():
    assert baseline_argv(steps=150) == "150"
    assert baseline_argv() == "200"  # submit's default run
    assert baseline_argv(steps=1000) == "200"


def test_on_cards_the_passes_run_one_after_the_other_and_the_baseline_takes_40_steps():
    assert baseline_argv(backend="furiosa:auto") == "40"
    assert baseline_argv(backend="cpu", interleave=0) == "40"
    assert baseline_argv(backend="cuda", steps=25) == "25"  # never longer than the run


def test_a_length_the_user_gives_is_kept():
    assert baseline_argv(steps=200, baseline_steps=10) == "10"
    assert baseline_argv(steps=20, baseline_steps=60) == "60"


def test_a_run_edited_to_fewer_steps_gets_a_baseline_no_longer_than_the_run():
    # The default is worked out when the Job starts, not frozen at submit.
    config = validate({"cards": 1, "resident": 0, "baseline": True, "steps": 500})
    assert config["baseline_steps"] is None
    assert baseline_steps({**config, "steps": 12}) == 12


@pytest.mark.parametrize("steps", [1, 12, 40, 41, 200, 201, 5000])
@pytest.mark.parametrize("interleave", [0, 2])
def test_the_trainer_run_by_hand_has_the_same_default(steps, interleave):
    from trainer.config import default_baseline_steps

    config = {"steps": steps, "interleave": interleave, "baseline_steps": None}
    assert default_baseline_steps(steps, interleave) == baseline_steps(config)
