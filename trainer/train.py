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

With ``--baseline`` two things keep the step-time model's comparison honest
(docs/design.md "Trainer", "Timing the two passes"):

- **Settling**: before any timed pass, untimed steps run on a throwaway
  all-offload copy of the model (same seed, its own data stream) until the
  step time settles: the median of the last ``SETTLE_K`` steps within
  ``SETTLE_TOL`` of the ``SETTLE_K`` before, at most ``--settle`` steps. The
  copy is dropped before the timed passes are built, so no timed pass's
  numerics change. One ``settle`` event says how many steps it took.
- **Interleaving** (``--interleave B``): the two passes alternate in blocks of
  B steps, in mirrored pairs (baseline then main, main then baseline, ...:
  ``interleaved_order``), each on its own model, schedule and data stream,
  so slow drift of the host hits both alike. Each pass's losses are those of
  the pass run alone (tested).

With ``--out DIR`` the run delivers its result (trainer/output/folder.py): the model
at the end (trainer/output/save.py), checkpoints every ``--checkpoint-every`` main
steps and when SIGTERM stops it after a whole step (trainer/output/checkpoint.py),
and ``--resume`` (default ``auto``) goes on from the newest one exactly as if
it had never stopped. ``--eval-data``/``--eval-split`` add the main pass's
held-out loss before its first step, every ``--eval-every`` steps and after
its last, as ``eval`` records outside every step's time.
"""

from __future__ import annotations

import platform
import resource
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from trainer.config import TrainConfig, default_baseline_steps
from trainer.engine.timing import SETTLE_K, SETTLE_TOL, interleaved_order, settled_by_rule
from trainer.errors import Cancelled, UsageError
from trainer.output import provenance
from trainer.output.console import console, log
from trainer.records import (
    BASELINE,
    MAIN,
    OPTIM_CALIBRATION,
    Eval,
    Event,
    RecordWriter,
    Start,
    Step,
)


@dataclass
class PassSummary:
    label: str
    steps: int
    losses: list[float] = field(default_factory=list)


class Recipe:
    def __init__(self, cfg: TrainConfig, writer: RecordWriter,
                 should_stop: Callable[[], bool] = lambda: False):
        from trainer.output.folder import OutputFolder

        cfg.validate()
        self.cfg = cfg
        self.writer = writer
        #: SIGTERM or SIGINT arrived: checked between steps, never inside one.
        self.should_stop = should_stop
        self.outdir = OutputFolder(self)
        self.eval_set = None
        self._expected_layout = None

    # --- setup ---------------------------------------------------------------

    def setup(self) -> None:
        import torch

        from trainer import models
        from trainer.backends import kinds
        from trainer.data import prepare
        from trainer.engine.layer_engine import Placement

        cfg = self.cfg
        # --out is this run's, or the run stops now, before the data is read or a step
        # is trained: not after the last step, with the time spent.
        self.outdir.claim()
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        self.spec = models.resolve(cfg.model)
        self.backends = kinds.parse(cfg.backend)
        # Refuse a placement that cannot be made before any record is written.
        Placement.plan(self.spec.layers, len(self.backends), cfg.resident_layers, tied=False)
        self.check_memory()
        # Read, tokenized (or read back from the cache), held out, packed.
        self.data = prepare.prepare(cfg, self.spec)
        self.vocab = self.data.vocab
        self.eval_set, self.eval_examples = self.data.eval_set, self.data.eval_examples
        self.batches = self.data.batches

    @property
    def tokenizer(self):
        """The data's tokenizer (None for synthetic data), loaded when first asked for."""
        return self.data.tokenizer

    def check_memory(self) -> None:
        """Refuse, before anything is allocated, a model the host cannot hold, by the step
        model's figures (trainer/footprint.py); a named model at its largest vocabulary."""
        from trainer import footprint

        cfg = self.cfg
        have = footprint.host_memory_bytes()
        if have is None:
            return
        need = footprint.run_host_bytes(
            self.spec.architecture, cards=len(self.backends), resident_per_card=cfg.resident_layers,
            backend=cfg.backend, baseline=cfg.baseline, interleave=cfg.interleave)
        problem = footprint.too_large(need, have, f"--model {cfg.model}")
        if problem:
            raise UsageError(problem)

    def build_engine(self, resident: int):
        from trainer import models
        from trainer.engine.layer_engine import LayerEngine

        cfg = self.cfg
        model = models.build(self.spec, self.vocab, cfg.seed)
        if cfg.lora:
            models.add_lora(model, cfg.lora, seed=cfg.seed)
        return LayerEngine(model, self.backends, resident, cfg.lr, cfg.weight_decay,
                           cfg.max_grad_norm, checkpoint=cfg.checkpoint)

    def expected_layout(self) -> dict:
        """The tensors, shapes and dtypes a checkpoint of this model holds for a pass,
        from the model's skeleton (no memory): what find_resume checks a checkpoint
        against before any engine is built."""
        from trainer import models
        from trainer.engine.layer_engine import state_layout_of

        if self._expected_layout is None:
            skeleton = models.skeleton(self.spec, self.vocab, self.cfg.lora)
            self._expected_layout = state_layout_of(skeleton, moments=True)
        return self._expected_layout

    # --- the passes ----------------------------------------------------------

    def run(self) -> list[PassSummary]:
        """Every pass to its last step (from a checkpoint's position when resuming); then
        the model to ``--out``. SIGTERM stops it after a whole step (``after_step``)."""
        cfg = self.cfg
        plan = []
        if cfg.baseline:
            plan.append((BASELINE, 0, cfg.baseline_steps
                         or default_baseline_steps(cfg.steps, cfg.interleave)))
        plan.append((MAIN, cfg.resident_layers, cfg.steps))
        resume = self.outdir.find_resume(plan)
        self.stop_if_asked([])
        if cfg.baseline and cfg.settle:
            self.settle(cfg.settle)
        passes = self.passes = [_Pass(self, *p) for p in plan]
        if resume is not None:
            self.outdir.position(resume, passes)
        if cfg.baseline and cfg.interleave:
            self.run_interleaved(passes, cfg.interleave, resume)
        else:
            for p in passes:
                if p.done:
                    continue  # finished before the checkpoint it resumed from
                p.begin(resume)
                self.outdir.started(resume, [p])
                while not p.done:
                    p.step()
                    self.after_step(p, passes)
                if p.label != MAIN:
                    p.finish()  # drops the engine before the next pass builds
        main = passes[-1]
        self.outdir.save(main)
        #: The trained model (the main pass's masters), for callers in this process.
        self.model = main.engine.model if main.engine is not None else None
        return [p.finish() for p in passes]

    def run_interleaved(self, passes: list[_Pass], block: int, resume) -> None:
        """Both passes alive at once, in blocks of ``block`` steps, in ABBA order.

        The order of the blocks is ``interleaved_order``'s: mirrored from one
        pair of blocks to the next, so drift that runs through the run hits
        both passes alike (see there). A resumed run goes on at the checkpoint's
        place in the same order.
        """
        order = interleaved_order([p.steps for p in passes], block)
        done = sum(p.steps_done for p in passes)  # a point of the order (find_resume)
        live = [p for p in passes if not p.done]
        for p in live:
            p.begin(resume)
        self.outdir.started(resume, live)
        for which in order[done:]:
            passes[which].step()
            self.after_step(passes[which], passes)

    def after_step(self, p: _Pass, passes: list[_Pass]) -> None:
        """Between two steps: the held-out loss and the checkpoint when due; SIGTERM."""
        cfg = self.cfg
        if p.label == MAIN:
            n = p.steps_done
            if self.eval_set is not None and (n == p.steps or (cfg.eval_every
                                                               and n % cfg.eval_every == 0)):
                self.evaluate(p)
            if cfg.out and cfg.checkpoint_every and n % cfg.checkpoint_every == 0:
                self.outdir.checkpoint(passes)
        if not all(q.done for q in passes):
            self.stop_if_asked(passes)

    def stop_if_asked(self, passes: list[_Pass], during: str | None = None) -> None:
        """SIGTERM: a checkpoint of where the passes are, then Preempted (Cancelled without
        an output folder). ``during``: what it stopped in, when not between two steps."""
        if not self.should_stop():
            return
        if self.cfg.out:
            raise self.outdir.preempt(passes, during)
        where = f"during {during}" if during else "after a whole step"
        raise Cancelled(f"stopped by SIGTERM {where} (no --out: no checkpoint)")

    def evaluate(self, p: _Pass) -> None:
        """The held-out loss of the pass now, as an ``eval`` record (outside every step).
        SIGTERM stops it between two micro-batches, as between two steps."""
        self.label = p.label
        t0 = time.perf_counter()
        try:
            loss, tokens = p.engine.evaluate(self._until_stopped(),
                                             label_tokens=self.eval_set.label_tokens)
        except _StoppedInEval as stopped:
            self.outdir.phases["eval_s"] += time.perf_counter() - t0
            moved = any(q.steps_done for q in self.passes)
            self.stop_if_asked(self.passes if moved else [], during=(
                f"the held-out evaluation after main step {p.steps_done} (micro-batch "
                f"{stopped.done + 1} of {len(self.eval_set)})"))
            raise AssertionError("stopped without a stop asked") from None
        seconds = time.perf_counter() - t0
        self.outdir.phases["eval_s"] += seconds
        record = Eval(config_label=p.label, step=p.steps_done, loss=loss, tokens=tokens,
                      examples=self.eval_examples, seconds=round(seconds, 6))
        self.writer.write(record)
        log(f"{p.label} eval after step {p.steps_done}: loss {loss:.4f} "
            f"(perplexity {record.perplexity:.2f}) over {self.eval_examples} examples")

    def _until_stopped(self):
        """The held-out micro-batches while no stop is asked (checked before each)."""
        for done, mb in enumerate(self.eval_set):
            if self.should_stop():
                raise _StoppedInEval(done)
            yield mb

    def settle(self, cap: int) -> None:
        """Untimed steps on a throwaway all-offload model until the step time settles.

        A process's first steps run slow for a while (allocator, caches, the
        CPU's clock); timing a pass in that stretch makes it look slower than
        the next. The throwaway model is built from the same seed and dropped,
        so the timed passes compute exactly what they would without this.
        """
        self.label = "settle"
        engine = self.build_engine(0)  # all-offload: never clamped
        schedule = _schedule(self.cfg, cap)
        stream = iter(self.batches)
        times: list[float] = []
        settled = False
        t_start = time.perf_counter()
        for step in range(1, cap + 1):
            self.stop_if_asked([])
            micro = [next(stream) for _ in range(self.cfg.accum)]
            t0 = time.perf_counter()
            engine.step(micro, schedule.at(step))
            times.append(time.perf_counter() - t0)
            if settled_by_rule(times):
                settled = True
                break
        del engine
        k = SETTLE_K
        message = (f"{len(times)} untimed steps on a throwaway copy before the timed passes: "
                   + (f"settled (median of the last {k} within {SETTLE_TOL:.0%} of the {k} before)"
                      if settled else f"not settled within --settle {cap}"))
        self.event("settle", message, data={
            "steps": len(times), "settled": settled, "cap": cap, "k": k, "tolerance": SETTLE_TOL,
            "seconds": round(time.perf_counter() - t_start, 3),
            "step_s": [round(t, 6) for t in times]})
        log(f"settle: {message}")
        self.label = None

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


class _StoppedInEval(Exception):
    """SIGTERM arrived during an evaluation, before its micro-batch ``done`` (from 0)."""

    def __init__(self, done: int):
        super().__init__(done)
        self.done = done


def _schedule(cfg: TrainConfig, steps: int):
    from trainer.engine import optim

    return optim.Schedule(cfg.lr, steps, cfg.warmup if cfg.warmup is not None
                          else optim.default_warmup(steps), cfg.schedule)


class _Pass:
    """One timed pass: its own engine (model from the seed), schedule and data stream.

    ``begin`` builds the engine and writes the ``start`` record; ``step`` runs
    and records one optimizer step; ``finish`` drops the engine. Two passes
    can be alive at once (interleaving): nothing here is shared between them.
    """

    def __init__(self, recipe: Recipe, label: str, resident: int, steps: int):
        self.recipe, self.label, self.resident, self.steps = recipe, label, resident, steps
        self.summary = PassSummary(label, steps)
        self.engine = None
        self.config: dict | None = None  # its start record's config (a checkpoint keeps it)

    @property
    def steps_done(self) -> int:
        return len(self.summary.losses)

    @property
    def done(self) -> bool:
        return self.steps_done >= self.steps

    def begin(self, resume=None) -> None:
        """Build the engine (from a checkpoint when resuming) and write the start record."""
        from trainer import models

        recipe, cfg = self.recipe, self.recipe.cfg
        recipe.label = self.label
        self.engine = engine = recipe.build_engine(self.resident)
        placement = engine.placement
        if self.steps_done:  # resumed: the checkpoint's masters, moments and start config
            recipe.outdir.load_engine(resume, self)
            config = self.config
        else:
            config = recipe.config_record(engine, self.steps)
            if placement.resident_layers == 0:
                config[OPTIM_CALIBRATION] = self.calibrate(engine)
        self.config = config
        recipe.writer.write(Start(
            config_label=self.label, config=config,
            run_id=cfg.run_id, versions=provenance.versions(),
            git=provenance.git_commit(), host=platform.node(), data=recipe.data.stats))
        recipe.event("placement", placement.describe())
        for b in recipe.backends:
            if b.picked:  # furiosa:auto: which card, and why not the ones before it
                recipe.event("backend", f"{b.spec} {b.picked}", data={"backend": b.spec})
        log(f"{self.label}: {placement.describe()}")
        self.schedule = _schedule(cfg, self.steps)
        self.extra_fixed = {
            "layers": placement.layers,
            "cards": placement.cards,
            "resident_per_card": placement.resident_per_card,
            "resident_layers": placement.resident_layers,
            "offloaded_layers": placement.offloaded_layers,
            "seq_len": cfg.seq_len,
            "accum": cfg.accum,
            "micro_batch": cfg.micro_batch,
            "params_per_layer": models.params_per_layer(engine.model),
        }
        self.stream = recipe.batches.stream(skip=self.steps_done * cfg.accum)
        if self.label == MAIN and self.steps_done == 0 and recipe.eval_set is not None:
            recipe.evaluate(self)  # the held-out loss before any update

    def calibrate(self, engine) -> dict:
        """The optimizer's cost per layer (trainer/engine/calibrate.py), for the step model.

        An all-offload pass is what the step model fits on, and it never runs a
        resident layer or varies the offloaded ones: timed once here, before
        the first step, on scratch buffers the size of its first layer's groups.
        """
        from trainer.engine import calibrate

        numels = [t.numel() for t in engine.slots[0].host_master.values()]
        t0 = time.perf_counter()
        costs = calibrate.optim_costs(numels, self.recipe.backends[0])
        log(f"{self.label}: optimizer calibration {costs} ({time.perf_counter() - t0:.2f} s)")
        return costs

    def step(self) -> None:
        recipe, cfg, engine = self.recipe, self.recipe.cfg, self.engine
        recipe.label = self.label
        step = len(self.summary.losses) + 1
        micro = [next(self.stream) for _ in range(cfg.accum)]
        lr = self.schedule.at(step)
        t0 = time.perf_counter()
        result = engine.step(micro, lr)
        step_s = time.perf_counter() - t0
        memory = {"host_rss_gb": round(host_peak_rss_gb(), 4)}
        peaks = engine.device_peaks_gb()
        if peaks is not None:
            memory["device_peak_gb"] = peaks
        recipe.writer.write(Step(
            config_label=self.label, step=step, loss=result.loss, step_s=round(step_s, 6),
            tokens=result.tokens, lr=lr,
            phases={k: round(v, 6) for k, v in result.phases.items()},
            memory=memory,
            extra={**self.extra_fixed, "label_tokens": result.label_tokens,
                   "grad_norm": round(result.grad_norm, 6)},
        ))
        self.summary.losses.append(result.loss)
        console.step(self.label, step, self.steps, result.loss, step_s)

    def finish(self) -> PassSummary:
        self.engine = None
        return self.summary


def host_peak_rss_gb() -> float:
    # ru_maxrss is in kilobytes on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
