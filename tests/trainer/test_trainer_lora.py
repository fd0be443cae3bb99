"""LoRA: only the adapters train, under every placement."""

from __future__ import annotations

from test_trainer_numerics import assert_same, engine_losses, plain_losses

from trainer import models


def test_lora_trains_only_the_adapters(synthetic_steps):
    before = models.build(models.resolve("tiny-llama"), 128, seed=0)
    initial = {n: p.detach().clone() for n, p in before.named_parameters()}
    _, engine = engine_losses(synthetic_steps, resident=1, cards=2, lora=4)
    after = engine.master_state()
    changed_adapters = 0
    for name, value in after.items():
        if "lora_" in name:
            changed_adapters += "lora_b" in name and bool(value.abs().max() > 0)
        else:
            base = name.replace(".base.", ".")
            assert (value == initial[base]).all(), f"frozen weight {name} changed"
    assert changed_adapters == 4 * 7  # every layer's seven projections learned something


def test_lora_adapters_alone_fit_a_batch(synthetic_steps):
    from trainer.backends import kinds
    from trainer.engine.layer_engine import LayerEngine

    model = models.build(models.resolve("tiny-llama"), 128, seed=0)
    models.add_lora(model, 8)
    engine = LayerEngine(model, kinds.parse("cpu,cpu"), 1, 2e-2, 0.0, 1.0)
    batch = synthetic_steps[0]
    losses = [engine.step(batch, 2e-2).loss for _ in range(20)]
    assert losses[-1] < losses[0] - 0.3, losses


def test_lora_losses_do_not_depend_on_placement(synthetic_steps):
    ref, _ = plain_losses(synthetic_steps, lora=4)
    resident, _ = engine_losses(synthetic_steps, resident=4, cards=1, lora=4)
    got, engine = engine_losses(synthetic_steps, resident=0, cards=2, lora=4)
    assert_same(resident, ref)
    assert_same(got, ref)
    # Offloaded layers keep only the adapters on the host.
    trainable = sum(m.numel() for s in engine.slots for m in s.host_master.values())
    assert trainable == sum(p.numel() for n, p in engine.model.named_parameters() if "lora_" in n)
