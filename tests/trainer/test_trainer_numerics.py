"""Placement must not change numerics: same seed, same losses, same weights."""

from __future__ import annotations

import pytest
import torch

from trainer import backends, models, optim
from trainer.engine import LayerEngine, Placement
from trainer.plain import PlainLoop

LR, WD, CLIP = 3e-3, 0.01, 1.0


def engine_losses(steps, model_name="tiny-llama", resident=0, cards=1, checkpoint=False,
                  lora=0, clip=CLIP):
    model = models.build(models.resolve(model_name), 128, seed=0)
    if lora:
        models.add_lora(model, lora)
    engine = LayerEngine(model, backends.parse(",".join(["cpu"] * cards)), resident, LR, WD,
                         clip, checkpoint=checkpoint)
    sched = optim.Schedule(LR, len(steps), 2)
    losses = [engine.step(b, sched.at(i + 1)).loss for i, b in enumerate(steps)]
    return losses, engine


def engine_losses_on(backend: str, steps, resident=0, model_name="tiny-llama"):
    model = models.build(models.resolve(model_name), 128, seed=0)
    engine = LayerEngine(model, backends.parse(backend), resident, LR, WD, CLIP)
    sched = optim.Schedule(LR, len(steps), 2)
    return [engine.step(b, sched.at(i + 1)).loss for i, b in enumerate(steps)]


def plain_losses(steps, model_name="tiny-llama", clip=CLIP):
    model = models.build(models.resolve(model_name), 128, seed=0)
    loop = PlainLoop(model, torch.device("cpu"), LR, WD, clip)
    sched = optim.Schedule(LR, len(steps), 2)
    return [loop.step(b, sched.at(i + 1))[0] for i, b in enumerate(steps)], model


def assert_same(got, ref, rtol=1e-5):
    assert len(got) == len(ref)
    for step, (a, b) in enumerate(zip(got, ref), 1):
        assert abs(a - b) <= rtol * abs(b), f"step {step}: {a} vs {b}"


@pytest.mark.parametrize("resident,cards", [(0, 1), (2, 1), (4, 1), (0, 2), (1, 2), (2, 2)])
def test_losses_match_the_plain_loop_for_every_placement(synthetic_steps, resident, cards):
    ref, _ = plain_losses(synthetic_steps)
    got, _ = engine_losses(synthetic_steps, resident=resident, cards=cards)
    assert_same(got, ref)
    assert ref[-1] < ref[0]  # the comparison is over steps where the model really learns


def test_weights_after_ten_steps_match_the_plain_loop(synthetic_steps):
    _, ref_model = plain_losses(synthetic_steps)
    _, engine = engine_losses(synthetic_steps, resident=1, cards=2)
    ref = dict(ref_model.named_parameters())
    for name, got in engine.master_state().items():
        torch.testing.assert_close(got, ref[name].detach(), rtol=1e-5, atol=1e-7, msg=name)


def test_tied_qwen2_matches_the_plain_loop_on_two_cards(synthetic_steps):
    ref, _ = plain_losses(synthetic_steps, "tiny-qwen2")
    got, engine = engine_losses(synthetic_steps, "tiny-qwen2", resident=1, cards=2)
    assert engine.placement.head_card == 0  # the tied head lives with the embedding
    assert_same(got, ref)


def test_clipping_is_by_the_global_norm_across_host_and_cards(synthetic_steps):
    # A tight clip makes every step clip: host and card parts must share one factor.
    ref, _ = plain_losses(synthetic_steps, clip=0.05)
    got, _ = engine_losses(synthetic_steps, resident=1, cards=2, clip=0.05)
    assert_same(got, ref)
    unclipped, _ = plain_losses(synthetic_steps, clip=0.0)
    assert abs(unclipped[-1] - ref[-1]) > 1e-4  # clipping did change the run


def test_layer_checkpointing_gives_the_same_losses(synthetic_steps):
    ref, _ = engine_losses(synthetic_steps[:4], resident=0, cards=1)
    got, _ = engine_losses(synthetic_steps[:4], resident=0, cards=1, checkpoint=True)
    assert_same(got, ref)


def test_placement_puts_the_first_layers_of_each_block_on_the_card():
    p = Placement.plan(layers=5, cards=2, resident_per_card=2, tied=False)
    assert p.card_of_layer == (0, 0, 0, 1, 1)
    assert p.resident == (True, True, False, True, True)
    assert p.head_card == 1
    assert (p.resident_layers, p.offloaded_layers) == (4, 1)


def test_more_cards_than_layers_is_refused():
    from trainer.errors import UsageError

    with pytest.raises(UsageError, match="every card needs a layer"):
        Placement.plan(layers=2, cards=3, resident_per_card=0, tied=False)
