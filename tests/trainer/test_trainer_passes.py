"""How the trainer times its two passes: settling before them, interleaving them.

Neither may change what the timed passes compute: the step-time model's
baseline and the asked config must train exactly as they would alone.
"""

from __future__ import annotations

import io
import itertools
import json
import statistics

import pytest

from trainer.config import TrainConfig
from trainer.engine.timing import SETTLE_K, interleaved_order, settled_by_rule
from trainer.errors import UsageError
from trainer.records import RecordWriter
from trainer.train import Recipe


def train(**overrides) -> list[dict]:
    """The records of a small tiny-llama run with --baseline, in process."""
    out = io.StringIO()
    cfg = TrainConfig(model="tiny-llama", backend="cpu,cpu", resident_layers=1, seq_len=32,
                      accum=2, lr=1e-3, baseline=True, baseline_steps=5, steps=7, settle=0,
                      threads=1)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    recipe = Recipe(cfg, RecordWriter(out, None))
    recipe.setup()
    recipe.run()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def losses(recs: list[dict], label: str) -> list[float]:
    return [r["loss"] for r in recs if r["kind"] == "step" and r["config_label"] == label]


@pytest.fixture(scope="module")
def alone():
    return train()


def test_interleaved_passes_run_in_blocks_in_mirrored_pairs(alone):
    recs = train(interleave=3)
    order = [(r["config_label"], r["step"]) for r in recs if r["kind"] == "step"]
    # Baseline then main, then main then baseline (ABBA); the longer main runs on alone.
    assert order == ([("baseline", s) for s in (1, 2, 3)] + [("main", s) for s in (1, 2, 3)]
                     + [("main", s) for s in (4, 5, 6)] + [("baseline", s) for s in (4, 5)]
                     + [("main", 7)])
    # Each pass still opens with its own start record, which says it was interleaved.
    starts = [r for r in recs if r["kind"] == "start"]
    assert [s["config_label"] for s in starts] == ["baseline", "main"]
    assert starts[1]["config"]["interleave"] == 3


def test_a_steady_drift_of_the_host_costs_both_interleaved_passes_the_same():
    # Step i of the run takes 1 + i/100 (a host slowing down steadily, or, read
    # backwards, a process still warming up). Strict alternation put the
    # baseline first in every pair of blocks: its steps sat 5 steps earlier on
    # average, a bias of 5 % of the drift per step. Mirrored pairs cancel it.
    order = interleaved_order([40, 40], 5)
    assert len(order) == 80 and order.count(0) == order.count(1) == 40
    mean_time = [statistics.mean(1 + i / 100 for i, which in enumerate(order) if which == p)
                 for p in (0, 1)]
    assert mean_time[0] == pytest.approx(mean_time[1], abs=1e-12)
    # Blocks of 5, in pairs AB BA AB BA ...: the middle blocks run back to back.
    runs = [(k, len(list(g))) for k, g in itertools.groupby(order)]
    assert runs == [(0, 5)] + [(1, 10), (0, 10)] * 3 + [(1, 10), (0, 5)]


def test_interleaving_passes_of_unequal_length_runs_the_longer_on_alone():
    assert interleaved_order([2, 7], 2) == [0, 0, 1, 1, 1, 1, 1, 1, 1]
    assert interleaved_order([4, 4], 10) == [0] * 4 + [1] * 4


def test_interleaved_passes_compute_exactly_what_they_compute_alone(alone):
    recs = train(interleave=2)
    # Same seed, same data order, same arithmetic in the same order on one thread:
    # the losses are bit for bit those of the passes run one after the other.
    assert losses(recs, "main") == losses(alone, "main")
    assert losses(recs, "baseline") == losses(alone, "baseline")
    assert len(losses(recs, "main")) == 7


def test_settling_steps_do_not_change_what_the_timed_passes_compute(alone):
    recs = train(settle=2 * SETTLE_K + 2)
    assert losses(recs, "main") == losses(alone, "main")
    assert losses(recs, "baseline") == losses(alone, "baseline")
    settle = [r for r in recs if r["kind"] == "event" and r["event"] == "settle"]
    assert len(settle) == 1
    data = settle[0]["data"]
    # The rule needs two blocks of SETTLE_K steps before it can say "settled".
    assert 2 * SETTLE_K <= data["steps"] <= 2 * SETTLE_K + 2
    assert len(data["step_s"]) == data["steps"]
    # Settling comes before the first timed pass opens.
    kinds = [r["kind"] for r in recs]
    assert kinds.index("event") < kinds.index("start")


def test_a_baseline_without_a_length_runs_as_many_steps_as_the_run():
    # Past the old default of 10, so that the model's medians are not over 5 steps.
    recs = train(baseline_steps=None, steps=12, resident_layers=0, backend="cpu", interleave=2)
    assert len(losses(recs, "baseline")) == 12


def test_a_run_without_a_baseline_does_not_settle():
    recs = train(baseline=False, settle=20)
    assert not [r for r in recs if r["kind"] == "event" and r["event"] == "settle"]
    assert losses(recs, "baseline") == []


def test_the_settling_rule_compares_the_median_of_the_last_k_steps_with_the_k_before():
    k = SETTLE_K
    assert settled_by_rule([0.010] * k + [0.0102] * k)  # 2 % apart
    assert not settled_by_rule([0.020] * k + [0.010] * k)  # still warming up
    assert not settled_by_rule([0.010] * (2 * k - 1))  # too few to tell
    # One preempted step does not move a median.
    assert settled_by_rule([0.010] * k + [0.010, 0.010, 0.050, 0.010, 0.010])


@pytest.mark.parametrize("key", ["settle", "interleave"])
def test_a_negative_settle_or_interleave_is_bad_input(key):
    with pytest.raises(UsageError, match=f"--{key}"):
        TrainConfig(**{key: -1}).validate()
