"""Host optimizer throughput on offloaded layers against torch's fused AdamW.

    OMP_NUM_THREADS=2 .venv/bin/python bench/trainer_host_adamw.py [--layers 4] [--rounds 15]

Builds a Llama-shaped model (hidden 1024, MLP 3584, 4:1 grouped-query
attention), places every layer offloaded on one cpu card, and times the
engine's host optimizer step (fused AdamW over each layer's flat fp32 master,
two groups per layer, global-norm clip factor applied inside the kernel)
against ``torch.optim.AdamW(fused=True)`` over the same layers' parameters as
separate tensors, and against a second identical torch optimizer on its own
copy of the tensors (an A/A control that shows this moment's noise floor),
all three in every round, alternating the order. Reports the median of
the rounds in Mparams/s and GB/s (28 bytes per parameter: param, grad,
exp_avg, exp_avg_sq read, param, exp_avg, exp_avg_sq written) and checks the
target: the engine at least 0.9x torch's fused AdamW.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from trainer.backends import kinds
from trainer.engine import optim
from trainer.engine.layer_engine import LayerEngine


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--clip", action="store_true", help="make every step clip (coef < 1)")
    args = ap.parse_args()

    config = LlamaConfig(vocab_size=512, hidden_size=1024, intermediate_size=3584,
                         num_hidden_layers=args.layers, num_attention_heads=16,
                         num_key_value_heads=4, attn_implementation="eager")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    twin = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    twin.load_state_dict(model.state_dict())
    # An A/A control: a second, identical torch optimizer on its own copy. How far
    # it lands from the first is the noise floor of this machine at this moment.
    triplet = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    triplet.load_state_dict(model.state_dict())

    engine = LayerEngine(model, kinds.parse("cpu"), 0, lr=1e-4, weight_decay=0.01,
                         max_grad_norm=1.0)
    host = engine.host_opt
    n = sum(p.numel() for g in host.param_groups for p in g["params"])
    for g in host.param_groups:
        for p in g["params"]:
            p.grad.normal_()

    ref_params = [p for layer in twin.model.layers for p in layer.parameters()]
    assert sum(p.numel() for p in ref_params) == n
    for p in ref_params:
        p.grad = torch.randn_like(p)
    ctl_params = [p for layer in triplet.model.layers for p in layer.parameters()]
    for p in ctl_params:
        p.grad = torch.randn_like(p)

    def torch_adamw(params):
        return torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2],
                                   "weight_decay": 0.01},
                                  {"params": [p for p in params if p.dim() < 2],
                                   "weight_decay": 0.0}],
                                 lr=1e-4, betas=optim.BETAS, eps=optim.EPS, fused=True)

    ref, ctl = torch_adamw(ref_params), torch_adamw(ctl_params)
    coef = 0.5 if args.clip else 1.0

    def ours():
        optim.step(host, coef)

    def theirs(params=ref_params, opt=ref):
        if coef < 1.0:
            torch._foreach_mul_([p.grad for p in params], coef)
        opt.step()

    def control():
        theirs(ctl_params, ctl)

    for fn in (ours, theirs, control, ours, theirs, control):  # allocate state, warm caches
        fn()
    runs = [("engine host AdamW", ours), ("torch AdamW(fused=True)", theirs),
            ("same torch, 2nd copy (A/A)", control)]
    times = {name: [] for name, _ in runs}
    for r in range(args.rounds):
        for name, fn in (runs if r % 2 == 0 else runs[::-1]):  # alternate who goes first
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)

    print(f"{n / 1e6:.1f} M parameters in {args.layers} offloaded layers, "
          f"threads {torch.get_num_threads()}, rounds {args.rounds}, clip {args.clip}")
    rates = {}
    for name, ts in times.items():
        med = statistics.median(ts)
        rates[name] = n / med
        print(f"{name:<26} median {med * 1000:8.1f} ms  {n / med / 1e6:8.0f} Mparams/s  "
              f"{n * 28 / med / 1e9:6.1f} GB/s  (min {min(ts) * 1000:.1f} ms)")
    ratio = rates["engine host AdamW"] / rates["torch AdamW(fused=True)"]
    noise = rates["same torch, 2nd copy (A/A)"] / rates["torch AdamW(fused=True)"]
    ok = ratio >= 0.9
    print(f"A/A control: identical torch optimizers differ by {abs(1 - noise):.0%} here")
    print(f"ratio engine/torch {ratio:.2f} (target >= 0.90): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
