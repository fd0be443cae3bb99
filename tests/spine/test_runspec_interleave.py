"""``submit --interleave``: the trainer alternates the baseline and the asked config."""

from __future__ import annotations

import pytest

from daemon.errors import BadInput
from daemon.run.spec import INTERLEAVE_BLOCK, trainer_argv, validate


def argv_of(**options) -> list[str]:
    config = validate({"cards": 1, "resident": 1, "baseline": True, **options})
    return trainer_argv({"id": 7, "config": config}, log_path=None, python="python")


def test_a_cpu_run_with_a_baseline_interleaves_by_default():
    argv = argv_of(backend="cpu")
    assert argv[argv.index("--interleave") + 1] == str(INTERLEAVE_BLOCK)


def test_a_run_on_cards_runs_its_passes_one_after_the_other_by_default():
    # Both passes' models would be on the card at once.
    assert "--interleave" not in argv_of(backend="furiosa:auto")
    assert "--interleave" not in argv_of(backend="cuda")


def test_interleave_zero_turns_it_off_and_a_block_size_is_passed_on():
    assert "--interleave" not in argv_of(backend="cpu", interleave=0)
    argv = argv_of(backend="furiosa:0", interleave=3)
    assert argv[argv.index("--interleave") + 1] == "3"


def test_without_a_baseline_there_is_nothing_to_interleave():
    assert "--interleave" not in argv_of(baseline=False)


def test_a_negative_block_is_bad_input():
    with pytest.raises(BadInput, match="--interleave"):
        validate({"cards": 1, "resident": 0, "interleave": -1})


def test_a_run_stored_before_the_option_existed_still_starts():
    config = validate({"cards": 1, "resident": 0, "baseline": True})
    del config["interleave"]
    assert "--interleave" not in trainer_argv({"id": 1, "config": config}, log_path=None,
                                              python="python")
