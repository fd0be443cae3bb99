"""The step model's premise on the engine: fwd_bwd is the same work in every placement.

The model predicts a config's fwd_bwd as the all-offload baseline's. These
tests hold the engine to what that needs: for a given number of cards, the
compute phase runs the same operations whatever the resident layers, and an
offloaded layer computes on the same card storage every step, as a resident
one does (its upload copies into that storage; nothing is allocated for it).
What the engine cannot hold, the cpu card sharing the host's caches with
the offloaded layers' host work, is measured by
bench/trainer_compute_placement.py (docs/design.md, "Compute and placement").
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainer import models
from trainer.backends import kinds
from trainer.engine.layer_engine import LayerEngine

LR, WD, CLIP = 1e-3, 0.01, 1.0


class _Ops(TorchDispatchMode):
    """Counts every aten operation dispatched while active."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


class _ComputeOps(LayerEngine):
    """The engine, counting the operations of its fwd_bwd phase only."""

    counted: list[Counter]

    @contextmanager
    def _phase(self, phases, name, cards):
        if name != "fwd_bwd":
            with super()._phase(phases, name, cards):
                yield
            return
        mode = _Ops()
        with mode, super()._phase(phases, name, cards):
            yield
        self.counted.append(mode.ops)


def _engine(cls, resident: int, cards: int) -> LayerEngine:
    model = models.build(models.resolve("tiny-llama"), 128, 0)
    return cls(model, kinds.parse(",".join(["cpu"] * cards)), resident, LR, WD, CLIP)


@pytest.mark.parametrize("cards,residents", [(1, (0, 1, 2, 4)), (2, (0, 1, 2))])
def test_the_compute_phase_runs_the_same_operations_whatever_the_resident_layers(
        synthetic_steps, cards, residents):
    seen = {}
    for resident in residents:
        engine = _engine(_ComputeOps, resident, cards)
        engine.counted = []
        for batch in synthetic_steps[:2]:
            engine.step(batch, LR)
        seen[resident] = engine.counted[-1]
    baseline = seen[0]
    assert sum(baseline.values()) > 100  # the forward and backward of every layer, counted
    for resident, ops in seen.items():
        assert ops == baseline, (
            f"{cards} card(s) x {resident} resident: fwd_bwd differs from the all-offload "
            f"baseline's by {(ops - baseline) + (baseline - ops)}")


def test_an_offloaded_layer_computes_on_the_same_card_storage_every_step(synthetic_steps):
    engine = _engine(LayerEngine, 2, 1)  # layers 0-1 resident, 2-3 offloaded

    def where() -> list[list[int]]:
        return [[p.data_ptr() for p in s.module.parameters()] for s in engine.slots]

    before = where()
    for batch in synthetic_steps[:3]:
        engine.step(batch, LR)
        assert where() == before
    engine.step(synthetic_steps[3], LR, update=False)  # upload and compute, no optimizer
    for s in engine.slots:
        flat = s.dev_flat["decay"]
        lo, hi = flat.data_ptr(), flat.data_ptr() + flat.numel() * flat.element_size()
        weights = [p for p in s.module.parameters() if p.dim() == 2]
        assert weights and all(lo <= p.data_ptr() < hi for p in weights)
        # The upload copied the master the host optimizer updated into that storage.
        if not s.resident:
            assert torch.equal(flat, s.host_master["decay"].detach())
