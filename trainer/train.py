"""The training recipe: config in, contract records out.

    python -m trainer train --run-id demo --model tiny-llama --full \\
        --resident-layers 2 --backend cpu,cpu --steps 60 --seq-len 64 --accum 2 \\
        --lr 1e-3 --data synthetic --seed 0 --log run.jsonl [--baseline]

``Recipe(cfg)`` rejects what it cannot run; ``setup()`` reads the data, the
tokenizer and the backends once; ``run()`` does the passes (an all-offload
``baseline`` pass first when asked, then ``main``), each on a freshly built
model from the same seed and the same data order, each opened by a ``start``
record and followed by one ``step`` record per optimizer step. The caller
writes the one ``end`` record.
"""

from __future__ import annotations

import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trainer import records
from trainer.errors import UsageError
from trainer.records import BASELINE, MAIN, Event, RecordWriter, Start, Step


@dataclass
class TrainConfig:
    run_id: str | None = None
    model: str = "tiny-llama"  # a named config or a folder with config.json
    lora: int = 0  # 0: full fine-tuning; N: LoRA adapters of rank N
    resident_layers: int = 0  # per card: layers whose master and AdamW stay on the card
    backend: str = "cpu"  # comma list, one entry per card
    steps: int = 60
    seq_len: int = 64
    accum: int = 2  # micro-batches per optimizer step
    micro_batch: int = 1  # sequences per micro-batch
    lr: float = 1e-3  # peak learning rate
    schedule: str = "cosine"  # warm-up then cosine to 0.1 lr, or "constant" after warm-up
    warmup: int | None = None  # warm-up steps; default min(10, max(1, steps // 10))
    weight_decay: float = 0.01  # on matrices only
    max_grad_norm: float = 1.0  # global-norm clipping; 0 turns it off
    data: str = "synthetic"  # synthetic | nsmc:PATH | jsonl:PATH | PATH.jsonl
    seed: int = 0  # model init and data order
    checkpoint: bool = False  # recompute each layer's forward in the backward
    threads: int | None = None  # torch host threads; None: torch's default
    baseline: bool = False  # run an all-offload pass first, for the step-time model
    baseline_steps: int | None = None  # default min(steps, 10)
    cache_dir: str | None = None  # where trained tokenizers are cached
    log: str | None = None  # records also go to this file

    def validate(self) -> None:
        for name in ("steps", "seq_len", "accum", "micro_batch"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if self.seq_len < 4:
            raise UsageError("--seq-len must be at least 4")
        if self.resident_layers < 0:
            raise UsageError("--resident-layers must be 0 or more")
        if not self.lr > 0:
            raise UsageError("--lr must be positive")
        if self.lora < 0:
            raise UsageError("--lora rank must be positive")
        if self.schedule not in ("cosine", "constant"):
            raise UsageError("--schedule must be cosine or constant")
        if self.threads is not None and self.threads < 1:
            raise UsageError("--threads must be at least 1")
        if self.baseline_steps is not None and self.baseline_steps < 1:
            raise UsageError("--baseline-steps must be at least 1")


@dataclass
class PassSummary:
    label: str
    steps: int
    losses: list[float] = field(default_factory=list)


def log(msg: str) -> None:
    """A human line on stderr."""
    print(f"[trainer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Recipe:
    def __init__(self, cfg: TrainConfig, writer: RecordWriter,
                 should_stop: Callable[[], bool] = lambda: False):
        cfg.validate()
        self.cfg = cfg
        self.writer = writer
        self.should_stop = should_stop

    # --- setup ---------------------------------------------------------------

    def setup(self) -> None:
        import torch

        from trainer import backends, data, models, tokenizer

        cfg = self.cfg
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        self.spec = models.resolve(cfg.model)
        self.backends = backends.parse(cfg.backend)
        self.source = data.open_source(cfg.data)
        self.tokenizer = None
        if self.source.kind != "synthetic":
            if self.spec.folder is not None:
                if not self.spec.has_tokenizer:
                    raise UsageError(f"{self.spec.folder} has no tokenizer for text data")
                self.tokenizer = tokenizer.from_folder(self.spec.folder)
            else:
                texts = self.source.texts()
                cache = Path(cfg.cache_dir) if cfg.cache_dir else tokenizer.default_cache_dir()
                t0 = time.perf_counter()
                self.tokenizer = tokenizer.trained(texts, data.tokenizer_vocab(texts), cache)
                log(f"tokenizer: {len(self.tokenizer)} tokens ({time.perf_counter() - t0:.2f} s)")
        if self.spec.folder is not None:
            import json
            vocab = json.loads((self.spec.folder / "config.json").read_text())["vocab_size"]
            self.vocab = vocab
        else:
            self.vocab = len(self.tokenizer) if self.tokenizer else data.SYNTHETIC_VOCAB
        self.batches = data.make_batches(self.source, self.tokenizer, cfg.seq_len,
                                         cfg.micro_batch, cfg.seed,
                                         min(self.vocab, data.SYNTHETIC_VOCAB))

    def build_engine(self, resident: int):
        from trainer import models
        from trainer.engine import LayerEngine

        cfg = self.cfg
        model = models.build(self.spec, self.vocab, cfg.seed)
        if cfg.lora:
            models.add_lora(model, cfg.lora, seed=cfg.seed)
        per_card_min = min(len(b) for b in _blocks(models.num_layers(model), len(self.backends)))
        if resident > per_card_min:
            self.event("resident_clamped",
                       f"--resident-layers {resident} is more than the {per_card_min} layers a "
                       f"card holds; using {per_card_min}", data={"asked": resident,
                                                                  "used": per_card_min})
            resident = per_card_min
        return LayerEngine(model, self.backends, resident, cfg.lr, cfg.weight_decay,
                           cfg.max_grad_norm, checkpoint=cfg.checkpoint,
                           should_stop=self.should_stop)

    # --- the passes ----------------------------------------------------------

    def run(self) -> list[PassSummary]:
        cfg = self.cfg
        passes = []
        if cfg.baseline:
            passes.append((BASELINE, 0, cfg.baseline_steps or min(cfg.steps, 10)))
        passes.append((MAIN, cfg.resident_layers, cfg.steps))
        return [self.train_pass(label, resident, steps) for label, resident, steps in passes]

    def train_pass(self, label: str, resident: int, steps: int) -> PassSummary:
        from trainer import models, optim

        cfg = self.cfg
        self.label = label
        engine = self.build_engine(resident)
        model, placement = engine.model, engine.placement
        self.writer.write(Start(
            config_label=label, config=self.config_record(engine, steps), run_id=cfg.run_id,
            versions=versions(), git=git_commit(), host=platform.node()))
        self.event("placement", placement.describe())
        log(f"{label}: {placement.describe()}")

        schedule = optim.Schedule(cfg.lr, steps, cfg.warmup if cfg.warmup is not None
                                  else optim.default_warmup(steps), cfg.schedule)
        extra_fixed = {
            "layers": placement.layers,
            "cards": placement.cards,
            "resident_per_card": placement.resident_per_card,
            "resident_layers": placement.resident_layers,
            "offloaded_layers": placement.offloaded_layers,
            "seq_len": cfg.seq_len,
            "accum": cfg.accum,
            "micro_batch": cfg.micro_batch,
            "params_per_layer": models.params_per_layer(model),
        }
        summary = PassSummary(label, steps)
        stream = iter(self.batches)
        for step in range(1, steps + 1):
            micro = [next(stream) for _ in range(cfg.accum)]
            lr = schedule.at(step)
            t0 = time.perf_counter()
            result = engine.step(micro, lr)
            step_s = time.perf_counter() - t0
            memory = {"host_rss_gb": round(host_peak_rss_gb(), 4)}
            peaks = engine.device_peaks_gb()
            if peaks is not None:
                memory["device_peak_gb"] = peaks
            self.writer.write(Step(
                config_label=label, step=step, loss=result.loss, step_s=round(step_s, 6),
                tokens=result.tokens, lr=lr,
                phases={k: round(v, 6) for k, v in result.phases.items()},
                memory=memory,
                extra={**extra_fixed, "label_tokens": result.label_tokens,
                       "grad_norm": round(result.grad_norm, 6)},
            ))
            summary.losses.append(result.loss)
            if step == 1 or step % 10 == 0 or step == steps:
                log(f"{label} step {step}/{steps} loss {result.loss:.4f} {step_s * 1000:.1f} ms")
        return summary

    def config_record(self, engine, steps: int) -> dict:
        import torch

        from trainer import models

        cfg = self.cfg
        d = asdict(cfg)
        d.pop("log", None)
        d.update(
            steps=steps,
            resident_layers=engine.placement.resident_per_card,
            cards=len(self.backends),
            backends=[b.spec for b in self.backends],
            full=cfg.lora == 0,
            layers=engine.placement.layers,
            params_per_layer=models.params_per_layer(engine.model),
            trainable_params=sum(p.numel() for p in engine.model.parameters()
                                 if p.requires_grad),
            vocab_size=self.vocab,
            hidden_size=engine.model.config.hidden_size,
            tied_head=models.is_tied(engine.model),
            placement=engine.placement.describe(),
            threads=torch.get_num_threads(),
        )
        return d

    def event(self, name: str, message: str, data: dict | None = None) -> None:
        self.writer.write(Event(event=name, message=message,
                                config_label=getattr(self, "label", None), data=data or {}))


def _blocks(layers: int, cards: int) -> list[range]:
    from trainer.engine import _block

    return [range(*_block(layers, cards, c)) for c in range(cards)]


def host_peak_rss_gb() -> float:
    # ru_maxrss is in kilobytes on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version(), "contract": records.SCHEMA_VERSION}
    for pkg in ("torch", "transformers", "tokenizers", "furiosa-torch"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
