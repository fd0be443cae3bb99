"""``trainer compile``: warm a backend's compile cache without training.

On a backend that compiles before it runs (cpu-compiled: whole graphs;
furiosa: each eager op on its first call), one micro-batch of the
training step's shape runs through every distinct graph once: the
embedding, a decoder layer forward and backward (all layers share that
graph), and the final norm and head forward and backward. Each first run
compiles the graph and fills the backend's cache; its time is written as an
``event`` record. No optimizer step runs and no weights change. On cpu and
cuda the trainer runs eagerly: there is nothing to compile, which the command
says (one event) before it exits 0.
"""

from __future__ import annotations

import time

import torch

from trainer import models
from trainer.backends import kinds
from trainer.data import batches
from trainer.engine.layer_engine import LayerEngine
from trainer.errors import UsageError
from trainer.records import EXIT_OK, End, Event, RecordWriter


def run_compile(backend_spec: str, model_name: str, seq_len: int, micro_batch: int,
                writer: RecordWriter) -> int:
    cards = kinds.parse(backend_spec)
    todo = [b for b in cards if b.needs_compile]
    if not todo:
        writer.write(Event("compile", f"nothing to compile on {backend_spec}: "
                                      "these backends run eagerly", data={"graphs": 0}))
        writer.write(End("ok"))
        return EXIT_OK
    if seq_len < 4:
        raise UsageError("--seq-len must be at least 4")
    spec = models.resolve(model_name)
    vocab = None if spec.folder else batches.SYNTHETIC_VOCAB
    # One card per distinct backend is enough: a cache is per graph, not per card.
    backend = todo[0]
    model = models.build(spec, vocab, seed=0)
    engine = LayerEngine(model, [backend], 0, lr=1e-3, weight_decay=0.0, max_grad_norm=0.0)
    ids, labels = batches.synthetic(seq_len, min(model.config.vocab_size, batches.SYNTHETIC_VOCAB),
                                    0, count=micro_batch)
    mb = batches.MicroBatch(ids, torch.ones_like(ids), labels)
    # The first step compiles every graph, in the order the step meets them;
    # the per-graph times come from timing each piece's first call.
    timings: dict[str, float] = {}
    for s in engine.slots[:1]:
        s.run = _timed(s.run, f"decoder layer forward ({model.config.model_type})", timings,
                       backend)
    engine.head_run = _timed(engine.head_run, "norm+head forward", timings, backend)
    t0 = time.perf_counter()
    engine.step([mb], lr=0.0, update=False)
    total = time.perf_counter() - t0
    for graph, seconds in timings.items():
        writer.write(Event("compile", f"{graph} compiled in {seconds:.1f} s on {backend.spec}",
                           data={"graph": graph, "seconds": round(seconds, 3),
                                 "backend": backend.spec, "seq_len": seq_len}))
    # The backward graphs compile during the first backward: in the step's total.
    writer.write(Event("compile", f"first forward and backward, compiling, took {total:.1f} s",
                       data={"graph": "step", "seconds": round(total, 3)}))
    writer.write(End("ok"))
    return EXIT_OK


def _timed(fn, name: str, timings: dict, backend):
    """Wrap ``fn`` so its first call's wall time (which compiles it) is recorded under ``name``."""
    def call(*args, **kwargs):
        if name in timings:
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        backend.synchronize()
        timings[name] = time.perf_counter() - t0
        return out
    return call
