"""What the optimizer costs per layer, timed on scratch buffers shaped like one layer.

The step model (daemon/stepmodel) predicts a config with resident layers from
an all-offload baseline. The baseline times the host optimizer over every
layer at once, so it cannot tell the optimizer's fixed cost per step (its
call, the clip norm's reduction, the first touch after the backward) from
its cost per layer, and it never runs the cards' optimizer on a decoder
layer. This module times both per layer, on the host and on card 0: the clip
norm's sum of squares and one fused AdamW step (as ``LayerEngine.step`` does
them) over scratch buffers shaped like one layer's parameter groups, then
over two layers', in alternation. The median of the paired differences is
the cost of one more layer (pairs next to each other in time, so a host that
slows down part-way moves both halves of a pair); the one-layer median less
that is the call's own fixed cost.

Scratch buffers and throwaway optimizers, filled with constants: the model,
its optimizers and the random state are untouched, so a pass computes
exactly what it would without the calibration.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from trainer.engine import optim

#: Timed pairs (one layer, then two) per place, after one untimed pass over the sets.
REPS = 25
#: Seconds a place may take, and the pairs it times at least. A host whose other
#: work stalls torch's second thread makes each call a scheduler slice long
#: (16 ms instead of 80 us: tiny-llama, 2 threads on 2 busy cores); the
#: calibration then stops early rather than hold the pass up for seconds.
BUDGET_S, MIN_REPS = 1.0, 5
#: A factor below 1: the step takes the path a clipped step takes.
COEF = 0.5
#: The timed calls cycle through copies of the scratch buffers adding up to this
#: much, three times a server's last-level cache: each call finds its buffers
#: cold, as the step's optimizer does after the forward and backward have run
#: through the whole model (warm, tiny-llama's layer costs 30 us, cold 39 us;
#: a resident layer costs 37-47 us a step in the trainer).
CYCLE_BYTES = 96 << 20
#: Two layers' masters, gradients and AdamW moments at most (fp32): above it (a
#: real model's layer) the calibration is skipped and the model estimates.
MAX_SCRATCH_BYTES = 1 << 30


def layer_cost(group_numels: list[int], device: torch.device, fused: bool,
               sync: Callable[[], None] = lambda: None,
               reps: int = REPS) -> dict[str, float] | None:
    """``{"per_layer_s", "call_s", "reps"}`` of the optimizer on ``device``; None when too big.

    ``group_numels``: the sizes of one layer's flat parameter groups (decay, no decay).
    """
    per_set = 4 * 4 * 3 * sum(group_numels)  # one layer's set and two layers', 4 fp32 each
    if not group_numels or per_set > MAX_SCRATCH_BYTES:
        return None

    def scratch(layers: int):
        params = []
        for _ in range(layers):
            for n in group_numels:
                p = torch.nn.Parameter(torch.full((n,), 0.01, device=device))
                p.grad = torch.full((n,), 1e-3, device=device)
                params.append(p)
        return optim.adamw(params, [], 1e-4, 0.0, fused), [p.grad for p in params]

    def once(opt, grads) -> float:
        t0 = time.perf_counter()
        float(optim.sq_norm(grads))
        optim.step(opt, COEF)
        sync()
        return time.perf_counter() - t0

    start = time.perf_counter()

    def spent(share: float) -> bool:
        return time.perf_counter() - start > BUDGET_S * share

    sets = []
    for _ in range(max(1, -(-CYCLE_BYTES // per_set))):
        one, two = scratch(1), scratch(2)
        once(*one), once(*two)  # the first step allocates the moments
        sets.append((one, two))
        if spent(0.5):
            break
    pairs = []
    while len(pairs) < reps and (len(pairs) < MIN_REPS or not spent(1.0)):
        one, two = sets[len(pairs) % len(sets)]
        pairs.append((once(*one), once(*two)))
    per_layer = max(statistics.median(b - a for a, b in pairs), 0.0)
    return {"per_layer_s": per_layer,
            "call_s": max(statistics.median(a for a, _ in pairs) - per_layer, 0.0),
            "reps": len(pairs)}


def optim_costs(group_numels: list[int], card, reps: int = REPS) -> dict:
    """A pass start config's ``optim_calibration`` (trainer/records.py): host and card 0.

    ``card``: card 0's ``Backend``. A place too big to time is left out.
    """
    out: dict = {}
    host = layer_cost(group_numels, torch.device("cpu"), fused=True, reps=reps)
    if host is not None:
        out.update(host_per_layer_s=round(host["per_layer_s"], 7),
                   host_call_s=round(host["call_s"], 7), reps=host["reps"])
    dev = None
    if card.needs_compile and card.kind != "cpu":
        # Every new shape compiles on such a card (furiosa), seconds each: not timed.
        out["device_not_timed"] = f"not timed on {card.spec}: its ops compile per shape"
    else:
        try:
            dev = layer_cost(group_numels, card.device, card.fused_adamw, card.synchronize, reps)
        except (RuntimeError, MemoryError) as exc:  # a card short of memory: the model estimates
            why = str(exc).strip().splitlines() or [type(exc).__name__]
            out["device_not_timed"] = why[0][:200]
    if dev is not None:
        out.update(device_per_layer_s=round(dev["per_layer_s"], 7),
                   device_call_s=round(dev["call_s"], 7), device_reps=dev["reps"])
    return out
