"""The held-out loss: over the whole held-out set, outside every step, changing nothing."""

from __future__ import annotations

import io
import math

import pytest
import torch
from tolerances import gamma, tiny_path

from trainer import records
from trainer.config import TrainConfig
from trainer.data import batches
from trainer.errors import UsageError
from trainer.records import End, Eval, RecordWriter, Step
from trainer.train import Recipe

SMALL = {"model": "tiny-llama", "backend": "cpu,cpu", "resident_layers": 1, "steps": 6,
         "seq_len": 16, "accum": 2, "lr": 1e-3, "threads": 1}


def run(**cfg):
    sink = io.StringIO()
    recipe = Recipe(TrainConfig(**{**SMALL, **cfg}), RecordWriter(sink))
    recipe.setup()
    recipe.run()
    return recipe, [records.parse_line(line) for line in sink.getvalue().splitlines()]


def of(recs, kind):
    return [r for r in recs if isinstance(r, kind)]


def test_the_held_out_loss_comes_before_the_first_step_every_n_and_after_the_last():
    _, recs = run(eval_data="synthetic", eval_every=4)
    assert [e.step for e in of(recs, Eval)] == [0, 4, 6]
    assert all(e.examples == batches.SYNTHETIC_EVAL and e.tokens > 0 for e in of(recs, Eval))
    assert of(recs, Eval)[-1].loss < of(recs, Eval)[0].loss  # it learns the chain


def test_evaluating_changes_no_step_of_training():
    _, plain = run()
    _, evaluated = run(eval_data="synthetic", eval_every=1)
    assert [s.loss for s in of(evaluated, Step)] == [s.loss for s in of(plain, Step)]


def test_the_held_out_loss_is_the_models_mean_loss_over_every_held_out_token():
    recipe, recs = run(eval_split=0.01)
    last = of(recs, Eval)[-1]
    total, tokens = 0.0, 0
    with torch.no_grad():
        for mb in recipe.eval_set:
            out = recipe.model(input_ids=mb.input_ids, labels=mb.labels)
            n = mb.label_tokens
            total, tokens = total + float(out.loss) * n if n else total, tokens + n
    assert last.tokens == tokens
    assert math.isclose(last.loss, total / tokens,
                        rel_tol=gamma(tiny_path(tokens=tokens, seq_len=16)))
    assert math.isclose(last.perplexity, math.exp(last.loss))


def test_a_split_holds_out_whole_examples_disjoint_from_training():
    ids = torch.arange(100).repeat_interleave(4).reshape(100, 4)
    train, held = batches.hold_out(batches.Encoded.full_rows(ids, pad_id=-1), 0.2, seed=0,
                                   micro_batch=1)
    train_ids, held_ids = (e.dense(torch.arange(len(e)))[0] for e in (train, held))
    train_rows, held_rows = set(train_ids[:, 0].tolist()), set(held_ids[:, 0].tolist())
    assert len(held_rows) == 20 and not train_rows & held_rows
    assert train_rows | held_rows == set(range(100))


def test_the_eval_time_is_its_own_phase_in_the_end_data():
    recipe, recs = run(eval_data="synthetic")
    assert recipe.outdir.end_data()["phases"]["eval_s"] == pytest.approx(
        sum(e.seconds for e in of(recs, Eval)), rel=1e-3)
    assert not of(recs, End)  # the CLI writes the end record, with these phases


@pytest.mark.parametrize("cfg, words", [
    ({"eval_every": 5}, "--eval-every needs --eval-data or --eval-split"),
    ({"eval_split": 0.1, "eval_data": "synthetic"}, "not both"),
    ({"eval_split": 1.5}, "fraction in (0, 1)"),
])
def test_held_out_options_that_cannot_work_are_refused(cfg, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        TrainConfig(**{**SMALL, **cfg}).validate()
