"""Placement must not change numerics: same seed, same losses, same weights.

The tolerances come from fp32 arithmetic, the steps and the learning rates:
see tolerances.py for the derivation. They hold under every
ATEN_CPU_CAPABILITY (default, avx2, avx512), which pick other kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from tolerances import loss_tolerances, tiny_path, weight_tolerance

from trainer import models
from trainer.backends import kinds
from trainer.engine import optim
from trainer.engine.layer_engine import LayerEngine, Placement
from trainer.engine.plain import PlainLoop

LR, WD, CLIP = 3e-3, 0.01, 1.0
TOKENS, SEQ = 2 * 32, 32  # synthetic_steps: two micro-batches of 32 tokens a step
PATH = tiny_path(TOKENS, SEQ)


def engine_losses(steps, model_name="tiny-llama", resident=0, cards=1, checkpoint=False,
                  lora=0, clip=CLIP):
    model = models.build(models.resolve(model_name), 128, seed=0)
    if lora:
        models.add_lora(model, lora)
    engine = LayerEngine(model, kinds.parse(",".join(["cpu"] * cards)), resident, LR, WD,
                         clip, checkpoint=checkpoint)
    sched = optim.Schedule(LR, len(steps), 2)
    losses = [engine.step(b, sched.at(i + 1)).loss for i, b in enumerate(steps)]
    return losses, engine


def engine_losses_on(backend: str, steps, resident=0, model_name="tiny-llama"):
    model = models.build(models.resolve(model_name), 128, seed=0)
    engine = LayerEngine(model, kinds.parse(backend), resident, LR, WD, CLIP)
    sched = optim.Schedule(LR, len(steps), 2)
    return [engine.step(b, sched.at(i + 1)).loss for i, b in enumerate(steps)]


def learning_rates(steps: int) -> list[float]:
    sched = optim.Schedule(LR, steps, 2)
    return [sched.at(i + 1) for i in range(steps)]


@dataclass
class Reference:
    """The plain loop's losses, with what the loss tolerance needs at each step."""

    losses: list[float]
    grad_l1: list[float]  # sum |g| over every weight
    grad_w_l1: list[float]  # sum |g * w|, w before the step

    def tolerances(self, forward_terms: int = TOKENS + 128) -> list[float]:
        # The same kernels run the forward in both loops: only the loss's own sums
        # (over the tokens, and the log-sum-exp over the vocabulary) may be reordered.
        return loss_tolerances(self.losses, self.grad_l1, self.grad_w_l1,
                               learning_rates(len(self.losses)), PATH, forward_terms)


def plain_losses(steps, model_name="tiny-llama", clip=CLIP, lora=0):
    model = models.build(models.resolve(model_name), 128, seed=0)
    if lora:
        models.add_lora(model, lora)
    loop = PlainLoop(model, torch.device("cpu"), LR, WD, clip)
    ref = Reference([], [], [])
    for lr, batches in zip(learning_rates(len(steps)), steps):
        before = [p.detach().clone() for p in loop.params]
        ref.losses.append(loop.step(batches, lr)[0])
        grads = [p.grad for p in loop.params]
        ref.grad_l1.append(sum(float(g.abs().sum()) for g in grads))
        ref.grad_w_l1.append(sum(float((g * w).abs().sum()) for g, w in zip(grads, before)))
    return ref, model


def assert_same(got, ref: Reference, tolerances=None):
    tolerances = tolerances or ref.tolerances()
    assert len(got) == len(ref.losses)
    for step, (a, b, tol) in enumerate(zip(got, ref.losses, tolerances), 1):
        assert abs(a - b) <= tol, f"step {step}: {a} vs {b} (tolerance {tol:.2e})"


def assert_weights_match(engine, ref_model, steps: int):
    rtol, atol = weight_tolerance(learning_rates(steps), PATH)
    ref = dict(ref_model.named_parameters())
    for name, got in engine.master_state().items():
        torch.testing.assert_close(got, ref[name].detach(), rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize("resident,cards", [(0, 1), (2, 1), (4, 1), (0, 2), (1, 2), (2, 2)])
def test_losses_match_the_plain_loop_for_every_placement(synthetic_steps, resident, cards):
    ref, _ = plain_losses(synthetic_steps)
    got, _ = engine_losses(synthetic_steps, resident=resident, cards=cards)
    assert_same(got, ref)
    assert ref.losses[-1] < ref.losses[0]  # the comparison is over steps where the model learns


@pytest.mark.parametrize("resident,cards", [(1, 2), (0, 1)])
def test_weights_after_ten_steps_match_the_plain_loop(synthetic_steps, resident, cards):
    _, ref_model = plain_losses(synthetic_steps)
    _, engine = engine_losses(synthetic_steps, resident=resident, cards=cards)
    assert_weights_match(engine, ref_model, len(synthetic_steps))


def test_the_weight_tolerance_is_tight_enough_to_see_a_missing_weight_decay(synthetic_steps):
    # The bound must not be so loose that it hides a real mistake: an engine that
    # forgets the decay is off by about sum(lr) * wd * |w| on every matrix.
    _, ref_model = plain_losses(synthetic_steps)
    model = models.build(models.resolve("tiny-llama"), 128, seed=0)
    engine = LayerEngine(model, kinds.parse("cpu,cpu"), 1, LR, 0.0, CLIP)
    for lr, batches in zip(learning_rates(len(synthetic_steps)), synthetic_steps):
        engine.step(batches, lr)
    with pytest.raises(AssertionError):
        assert_weights_match(engine, ref_model, len(synthetic_steps))


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
    # Clipping did change the run, by more than the tolerance: the comparison can see it.
    assert abs(unclipped.losses[-1] - ref.losses[-1]) > ref.tolerances()[-1]


def test_layer_checkpointing_gives_the_same_losses(synthetic_steps):
    ref, _ = plain_losses(synthetic_steps[:4])
    plain, _ = engine_losses(synthetic_steps[:4], resident=0, cards=1)
    got, _ = engine_losses(synthetic_steps[:4], resident=0, cards=1, checkpoint=True)
    # Both are within the tolerance of the plain loop, so within twice it of each other.
    assert_same(got, ref)
    assert_same(plain, ref)


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
