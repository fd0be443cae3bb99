"""Upload and download bandwidth of the engine on CUDA against the link's measured peak.

    .venv/bin/python bench/trainer_cuda_link.py [--layers 8]

Where a GPU is present: measures the host<->device peak with large pinned
copies (1 GiB, median of 10 each way), then runs the engine all-offload on
``cuda`` (Llama-shaped layers of hidden 2048) and divides each step's
uploaded and downloaded bytes by its ``upload`` and ``download`` phases.
Prints both and the fraction of the peak; target: at least 0.8 of the peak.
Without a GPU it says so and exits 0 (nothing measured).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch


def peak(direction: str, nbytes: int = 1 << 30, rounds: int = 10) -> float:
    host = torch.empty(nbytes // 4, dtype=torch.float32, pin_memory=True)
    dev = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    times = []
    for _ in range(rounds + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        (dev.copy_(host) if direction == "up" else host.copy_(dev))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times[1:]) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device here: nothing measured")
        return 0
    from transformers import AutoModelForCausalLM, LlamaConfig

    from trainer.backends import kinds
    from trainer.data import batches
    from trainer.engine.layer_engine import LayerEngine

    up_peak, down_peak = peak("up"), peak("down")
    config = LlamaConfig(vocab_size=512, hidden_size=2048, intermediate_size=7168,
                         num_hidden_layers=args.layers, num_attention_heads=16,
                         num_key_value_heads=4, attn_implementation="eager")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    engine = LayerEngine(model, kinds.parse("cuda"), 0, 1e-4, 0.01, 1.0)
    nbytes = sum(m.numel() * 4 for s in engine.slots for m in s.host_master.values())
    stream = iter(batches.make_batches(batches.open_source("synthetic"), None, 512, 1, 0, 512))
    ups, downs = [], []
    for i in range(args.steps):
        res = engine.step([next(stream), next(stream)], 1e-4)
        if i >= 2:
            ups.append(nbytes / res.phases["upload"] / 1e9)
            downs.append(nbytes / res.phases["download"] / 1e9)
    up, down = statistics.median(ups), statistics.median(downs)
    print(f"{torch.cuda.get_device_name()}: {nbytes / 1e9:.2f} GB each way per step")
    print(f"peak  up {up_peak:6.1f} GB/s   down {down_peak:6.1f} GB/s (pinned 1 GiB copies)")
    print(f"engine up {up:6.1f} GB/s ({up / up_peak:.2f})  down {down:6.1f} GB/s "
          f"({down / down_peak:.2f})")
    ok = up >= 0.8 * up_peak and down >= 0.8 * down_peak
    print("target >= 0.8 of peak:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
