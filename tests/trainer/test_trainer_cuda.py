"""The same guarantees on a CUDA card, where one is present (skipped otherwise)."""

from __future__ import annotations

import pytest
import torch
from test_trainer_numerics import CLIP, LR, PATH, WD, assert_same, plain_losses

from trainer import models
from trainer.backends import kinds
from trainer.backends.check import check
from trainer.engine import optim
from trainer.engine.layer_engine import LayerEngine

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def test_cuda_passes_check_against_cpu_fp32():
    torch.backends.cuda.matmul.allow_tf32 = False
    rows, _ = check("cuda", "tiny-llama", 32, 0, 0)
    assert all(r.ok for r in rows), rows


@pytest.mark.parametrize("resident", [0, 2])
def test_cuda_losses_match_the_cpu_plain_loop(synthetic_steps, resident):
    torch.backends.cuda.matmul.allow_tf32 = False
    ref, _ = plain_losses(synthetic_steps)
    model = models.build(models.resolve("tiny-llama"), 128, seed=0)
    engine = LayerEngine(model, kinds.parse("cuda"), resident, LR, WD, CLIP)
    sched = optim.Schedule(LR, len(synthetic_steps), 2)
    got = [engine.step(b, sched.at(i + 1)).loss for i, b in enumerate(synthetic_steps)]
    # cuBLAS sums in its own orders: every sum on the forward's path may differ too.
    assert_same(got, ref, ref.tolerances(forward_terms=PATH))
    assert engine.device_peaks_gb()[0] > 0
