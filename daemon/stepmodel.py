"""The step-time model: fit its terms from an all-offload baseline, predict any config.

Torch-free: the daemon, the CLI, the TUI and export all import it.

API (plain step dicts in, frozen dataclasses out; a step dict is a row of
``Store.steps`` or a parsed JSON ``step`` record):

- ``fit(baseline_steps, baseline_config=None, *, resident_steps=None, ...) -> Terms``
  Terms from the medians of the baseline's phases over steps 6-N. A resident
  pass (any pass with resident layers on the same hardware) gives the device
  optimizer's cost per layer; without one that term is estimated and marked.
  Raises ``ModelFitError`` ("cannot fit: the baseline has no upload timings").
- ``Shape``: a config as the model sees it (layers, cards, resident per card,
  accumulation, sequence length, micro-batch). ``Shape.of_steps(steps)``
  reads it from step records, ``Shape.of_config(config)`` from a start config.
- ``predict(terms, target: Shape) -> Prediction``: step time, tok/s and the
  predicted split by phase.
- ``compare(prediction, measured_steps, last=, interleave=) -> Comparison``:
  the measured median of steps 6-N (6-last) with its interquartile range, ``error = (model - measured) /
  measured``, and the measured split by phase beside the predicted one.
- ``for_run(store, run_id) -> Comparison | None``: the run's main pass against
  the model fitted from its own baseline pass (None when it has no baseline
  pass or no main steps yet). ``terms_for_run(store, run_id)`` gives the terms.
  When the trainer interleaved the passes, only the main steps that ran
  alongside the baseline's are compared (``paired_window``), paired with the
  baseline's block by block (``paired_medians``).
- ``model_config(store, run_id, cards=, resident=, ...) -> Answer``: a config
  that has not run, from a stored run's all-offload pass (``baseline_of``),
  with its memory check; what ``rngdctl model`` prints.
- ``memory_check(target, params_per_layer=, card_gb=, edge=) -> MemoryCheck``:
  whether C x R resident layers fit on the cards by the trainer's own
  accounting (``card_bytes``); ``host_memory_check`` the same for the host
  (``host_bytes``: the offloaded layers, and the cards when the host plays them).
- ``design_row(comparison, run=, hardware=)``, ``hardware_of(store, run_id)``
  and ``update_design_table(design_md_path, rows)``: the step-model table kept
  in docs/design.md between marker comments (``rngdctl export --update-design``).

Errors: ``ModelFitError`` when a baseline cannot give the terms (one line,
"cannot fit: the baseline has no upload timings"); ``BadInput`` for a config
the trainer cannot place.

The form (docs/design.md "## Step-time model" says why): the trainer
(trainer/engine.py) times its phases one after another, uploads every
offloaded layer once a step and downloads its gradient once a step, so a step
is the sum of its phases:

    step = fwd_bwd + upload + download + host_optim + device_optim + wait + unclaimed
    fwd_bwd      = T_dev * (tokens / tokens_b) * (L / L_b)
    upload       = u * offloaded
    download     = d * offloaded
    host_optim   = h * offloaded          (clip norm and fused AdamW on the host)
    device_optim = g0 + g * resident      (g0: embed, norm and head, on the cards always)
    wait, unclaimed: as in the baseline

``resident = cards * resident_per_card``, ``offloaded = L - resident`` and
``_b`` marks the baseline. Every term is a median over the baseline's steps
6-N, so predicting the baseline's own config gives its measured median.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from daemon import stats
from daemon.errors import BadInput, ModelFitError
from trainer.records import BASELINE, MAIN

#: The phases the model needs in the baseline, with the words its error uses.
NEEDED = {
    "fwd_bwd": "device compute (fwd_bwd)",
    "upload": "upload",
    "download": "download",
    "host_optim": "host optimizer (host_optim)",
    "device_optim": "device optimizer (device_optim)",
}
#: Phases that may be missing (taken as zero).
OPTIONAL = ("wait",)
#: The split's keys, in display order. ``unclaimed`` is the part of a step that
#: no phase claimed (step_s minus the sum of the phases).
SPLIT = ("fwd_bwd", "upload", "download", "host_optim", "device_optim", "wait", "unclaimed")

#: The least move of the compute term that counts as the host changing between
#: the passes, whatever their spread: below it, the notice would fire on the
#: few-percent differences one process's two passes show on a quiet host.
HOST_MOVED = 0.02
#: A median's standard error per IQR / sqrt(n), for normally spread values.
MEDIAN_SE = 1.2533 / 1.349

#: A term whose source starts with this was not measured.
ESTIMATED = "estimated"


# === Shapes ==================================================================


def _extra(step: dict) -> dict:
    """The step's extra keys: the store's ``extra`` column, or top-level keys of raw JSON."""
    extra = step.get("extra")
    return extra if isinstance(extra, dict) else step


def blocks(layers: int, cards: int) -> list[int]:
    """Layers per card: contiguous blocks as even as possible, extras on the first cards.

    The trainer's placement (trainer/engine.py ``_block``), mirrored torch-free.
    """
    base, extra = divmod(layers, cards)
    return [base + (1 if c < extra else 0) for c in range(cards)]


def check_placement(layers: int, cards: int, resident_per_card: int) -> None:
    """Refuse a placement the trainer cannot make (BadInput); never clamp it.

    One rule for ``submit``, ``model`` and the trainer (trainer/engine.py
    ``Placement.plan`` refuses the same configs with the same words): every card
    needs a layer, and a card cannot keep more layers resident than its block holds.
    """
    if cards > layers:
        raise BadInput(f"{cards} cards for {layers} layers: every card needs a layer")
    most = min(blocks(layers, cards))
    if resident_per_card > most:
        raise BadInput(
            f"{resident_per_card} resident layers per card is more than the {most} "
            f"layers a card holds ({layers} layers on {cards} cards)")


@dataclass(frozen=True)
class Shape:
    """A training config as the step-time model sees it; one that cannot exist is BadInput."""

    layers: int
    cards: int = 1
    resident_per_card: int = 0
    accum: int = 1
    seq_len: int = 64
    micro_batch: int = 1

    def __post_init__(self):
        if self.layers < 1 or self.cards < 1 or self.accum < 1 or self.seq_len < 1 \
                or self.micro_batch < 1 or self.resident_per_card < 0:
            raise BadInput(f"not a config the model can price: {self.describe()}")
        check_placement(self.layers, self.cards, self.resident_per_card)

    @property
    def resident(self) -> int:
        return self.cards * self.resident_per_card

    @property
    def offloaded(self) -> int:
        return self.layers - self.resident

    @property
    def tokens(self) -> int:
        """Token positions per optimizer step (padding included: the device computes it)."""
        return self.micro_batch * self.seq_len * self.accum

    def describe(self) -> str:
        return (f"{self.cards} card{'s' if self.cards != 1 else ''} x {self.resident_per_card} "
                f"resident of {self.layers} layers, seq {self.seq_len}, accum {self.accum}"
                + (f", micro-batch {self.micro_batch}" if self.micro_batch != 1 else ""))

    @classmethod
    def of_steps(cls, steps: list[dict]) -> Shape:
        """The shape a pass's step records declare (their extra keys)."""
        return cls.of_step(steps[-1] if steps else None)

    @classmethod
    def of_step(cls, step: dict | None) -> Shape:
        """The shape one step record (a pass's newest) declares."""
        if not step:
            raise ModelFitError("cannot fit: the pass has no steps")
        extra = _extra(step)
        missing = [k for k in ("layers", "cards", "resident_per_card", "seq_len", "accum")
                   if not isinstance(extra.get(k), int)]
        if missing:
            raise ModelFitError(f"cannot fit: the step records lack {', '.join(missing)}")
        return cls(layers=extra["layers"], cards=extra["cards"],
                   resident_per_card=extra["resident_per_card"], accum=extra["accum"],
                   seq_len=extra["seq_len"], micro_batch=int(extra.get("micro_batch") or 1))

    @classmethod
    def of_config(cls, config: dict) -> Shape:
        """The shape a pass's start config declares."""
        missing = [k for k in ("layers", "cards", "resident_layers", "seq_len", "accum")
                   if not isinstance(config.get(k), int)]
        if missing:
            raise ModelFitError(f"cannot fit: the pass's config lacks {', '.join(missing)}")
        return cls(layers=config["layers"], cards=config["cards"],
                   resident_per_card=config["resident_layers"], accum=config["accum"],
                   seq_len=config["seq_len"], micro_batch=int(config.get("micro_batch") or 1))


# === Terms ===================================================================


@dataclass(frozen=True)
class Term:
    """One fitted term: its value, what it is per, and where it came from."""

    name: str
    seconds: float
    per: str  # "step", "offloaded layer", ...
    source: str

    @property
    def estimated(self) -> bool:
        return self.source.startswith(ESTIMATED)


@dataclass(frozen=True)
class Terms:
    """The model's terms, fitted from one baseline (and maybe one resident pass)."""

    baseline: Shape
    compute: Term  # T_dev: fwd_bwd per step at the baseline's tokens and layers
    upload: Term  # u, per offloaded layer
    download: Term  # d, per offloaded layer
    host_optim: Term  # h, per offloaded layer
    device_optim_fixed: Term  # g0: embed, norm and head
    device_optim: Term  # g, per resident layer
    wait: Term
    unclaimed: Term
    baseline_median_s: float
    baseline_tokens: float  # median tokens per step the baseline reports
    baseline_iqr: tuple[float, float]
    compute_iqr: tuple[float, float] | None = None  # quartiles of the baseline's fwd_bwd
    compute_steps: int = 0  # how many steps those quartiles and the medians are over

    def all(self) -> list[Term]:
        return [self.compute, self.upload, self.download, self.host_optim,
                self.device_optim_fixed, self.device_optim, self.wait, self.unclaimed]

    def as_dict(self) -> dict:
        return {"baseline": asdict(self.baseline), "baseline_median_s": self.baseline_median_s,
                "baseline_iqr_s": list(self.baseline_iqr),
                "terms": [{**asdict(t), "estimated": t.estimated} for t in self.all()]}


Steps = list[dict] | stats.PassStats  # a pass's decoded steps, or its aggregates


def _pass(steps: Steps | None) -> stats.PassStats | None:
    """A pass's numbers: ``stats.pass_stats`` from the store, or computed from step dicts."""
    if steps is None or isinstance(steps, stats.PassStats):
        return steps
    return stats.PassStats.of_steps(list(steps))


def _phase_medians(p: stats.PassStats, what: str) -> dict[str, float]:
    """Median seconds of each phase over steps 6-N; ModelFitError when one is missing."""
    for name, words in NEEDED.items():
        have = p.phase_counts.get(name, 0)
        if not have:
            raise ModelFitError(f"cannot fit: the {what} has no {words} timings")
        if have < p.steady:
            raise ModelFitError(f"cannot fit: {p.steady - have} of the {what}'s "
                                f"{p.steady} steady steps have no {words} timings")
    return {ph: p.phase_medians[ph] for ph in (*NEEDED, *OPTIONAL)}


def _range(p: stats.PassStats) -> str:
    first, last = p.first_step, p.last_step
    return f"median of steps {first}-{last}" if last > first else f"step {first}"


def edge_params(config: dict | None) -> int | None:
    """Parameters always on the cards (embedding, final norm, head) from a start config."""
    if not config:
        return None
    vocab, hidden = config.get("vocab_size"), config.get("hidden_size")
    if not isinstance(vocab, int) or not isinstance(hidden, int):
        return None
    return vocab * hidden * (1 if config.get("tied_head") else 2) + hidden


def fit(baseline_steps: Steps, baseline_config: dict | None = None, *,
        resident_steps: Steps | None = None, baseline_label: str = "baseline",
        resident_label: str = "resident pass") -> Terms:
    """Fit the terms from an all-offload baseline's steps (medians over steps 6-N).

    Steps are a pass's step dicts or its ``stats.PassStats`` (``stats.pass_stats``:
    what the store-reading functions below pass, at the same cost for any length).
    ``baseline_config`` is the pass's start config: it fills in the shape when
    the step records lack it. ``resident_steps`` (a pass with resident layers,
    same hardware and model) gives the device optimizer's cost per layer;
    without it that term is estimated and its source says so.
    """
    base = _pass(baseline_steps)
    if not base.steps:
        raise ModelFitError("cannot fit: the baseline has no steps")
    try:
        shape = Shape.of_step(base.last)
    except ModelFitError:
        if baseline_config is None:
            raise
        shape = Shape.of_config(baseline_config)
    if shape.resident:
        raise ModelFitError(f"cannot fit: the baseline has {shape.resident} resident layers; "
                            "the model needs an all-offload baseline (0 resident)")
    med = _phase_medians(base, "baseline")
    median_s = float(base.median_step_s)
    where = f"{baseline_label}, {_range(base)}"
    off = shape.offloaded

    host = Term("host_optim", med["host_optim"] / off, "offloaded layer", where)
    resident = _pass(resident_steps)
    if resident is not None and resident.steps:
        rshape = Shape.of_step(resident.last)
        if not rshape.resident:
            raise ModelFitError(f"cannot fit: the {resident_label} has no resident layers")
        rmed = _phase_medians(resident, resident_label)
        per_layer = (rmed["device_optim"] - med["device_optim"]) / rshape.resident
        device = Term("device_optim", max(per_layer, 0.0), "resident layer",
                      f"{resident_label}, {_range(resident)}, less the baseline's embed and head")
    else:
        device = Term("device_optim", host.seconds, "resident layer",
                      f"{ESTIMATED}: equal to the host optimizer per layer, "
                      "for want of a resident pass")

    return Terms(
        baseline=shape,
        compute=Term("fwd_bwd", med["fwd_bwd"], "step at the baseline's tokens and layers", where),
        upload=Term("upload", med["upload"] / off, "offloaded layer", where),
        download=Term("download", med["download"] / off, "offloaded layer", where),
        host_optim=host,
        device_optim_fixed=Term("device_optim_fixed", med["device_optim"],
                                "step (embed, norm and head)", where),
        device_optim=device,
        wait=Term("wait", med["wait"], "step", where),
        unclaimed=Term("unclaimed", median_s - sum(med.values()), "step",
                       f"{baseline_label}: median step less the phases' medians"),
        baseline_median_s=median_s,
        baseline_tokens=base.median_tokens_or(shape.tokens),
        baseline_iqr=base.iqr_step_s,
        compute_iqr=base.fwd_bwd_iqr,
        compute_steps=base.steady,
    )


# === Prediction ==============================================================


@dataclass(frozen=True)
class Prediction:
    target: Shape
    step_s: float
    tokens: float  # per step
    phases: dict  # SPLIT -> seconds
    terms: Terms

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s if self.step_s > 0 else math.nan

    @property
    def estimated_terms(self) -> list[str]:
        """Terms that are estimates and that this prediction uses."""
        used = [t for t in self.terms.all()
                if not (t.name == "device_optim" and self.target.resident == 0)]
        return [t.name for t in used if t.estimated]

    def as_dict(self) -> dict:
        return {"target": asdict(self.target), "step_s": self.step_s, "tokens": self.tokens,
                "tokens_per_s": self.tokens_per_s, "phases": dict(self.phases),
                "estimated_terms": self.estimated_terms, **self.terms.as_dict()}


def predict(terms: Terms, target: Shape) -> Prediction:
    """The step time of ``target`` from ``terms``: the form in the module docstring."""
    b = terms.baseline
    work = (target.tokens / b.tokens) * (target.layers / b.layers)
    phases = {
        "fwd_bwd": terms.compute.seconds * work,
        "upload": terms.upload.seconds * target.offloaded,
        "download": terms.download.seconds * target.offloaded,
        "host_optim": terms.host_optim.seconds * target.offloaded,
        "device_optim": terms.device_optim_fixed.seconds
        + terms.device_optim.seconds * target.resident,
        "wait": terms.wait.seconds,
        "unclaimed": terms.unclaimed.seconds,
    }
    tokens = terms.baseline_tokens * target.tokens / b.tokens
    return Prediction(target, sum(phases.values()), tokens, phases, terms)


# === Comparison with what was measured =======================================


@dataclass(frozen=True)
class Comparison:
    prediction: Prediction
    measured_s: float  # median step_s over steps 6-N
    iqr: tuple[float, float]  # quartiles of the same steps
    steps: int  # how many steps the median is over
    first_step: int
    last_step: int
    measured_tokens_per_s: float
    measured_phases: dict  # SPLIT -> median seconds
    interleave: int = 0  # block size when the passes alternated; 0: one after the other
    measured_compute_iqr: tuple[float, float] | None = None  # quartiles of the main's fwd_bwd
    paired: bool = False  # measured paired block by block with the baseline (``paired_medians``)

    @property
    def window(self) -> str:
        """Which steps the measured median is over, in words."""
        steps = (f"steps {self.first_step}-{self.last_step}" if self.last_step > self.first_step
                 else f"step {self.first_step}")
        if self.interleave:
            steps += f", interleaved with the baseline in blocks of {self.interleave}"
        if self.paired:
            steps += ", paired block by block"
        return steps

    @property
    def model_s(self) -> float:
        return self.prediction.step_s

    @property
    def error(self) -> float:
        """(model - measured) / measured, as a fraction."""
        return relative_error(self.model_s, self.measured_s)

    @property
    def model_tokens_per_s(self) -> float:
        """The measured tokens per step over the model's step time."""
        tokens = self.measured_tokens_per_s * self.measured_s
        return tokens / self.model_s if self.model_s > 0 else math.nan

    @property
    def worst_phase(self) -> str:
        """The phase whose prediction is furthest from its measured median."""
        return max(SPLIT, key=lambda p: abs(self.prediction.phases[p]
                                            - self.measured_phases.get(p, 0.0)))

    def split(self) -> list[dict]:
        """Predicted and measured seconds per phase, side by side.

        ``error`` is the phase's share of the step's error, (model - measured)
        / measured step: the phases' shares add up to ``error``.
        """
        return [{"phase": p, "model_s": self.prediction.phases[p],
                 "measured_s": self.measured_phases.get(p, 0.0),
                 "diff_s": self.prediction.phases[p] - self.measured_phases.get(p, 0.0),
                 "error": (self.prediction.phases[p] - self.measured_phases.get(p, 0.0))
                 / self.measured_s if self.measured_s else None}
                for p in SPLIT]

    @property
    def compute_moved(self) -> float:
        """Measured device compute over the model's, less 1: the same work measured twice.

        The model scales the baseline's fwd_bwd by tokens and layers only, so
        on a steady host this is near 0 whatever the placement.
        """
        model = self.prediction.phases["fwd_bwd"]
        return self.measured_phases["fwd_bwd"] / model - 1 if model > 0 else math.nan

    @property
    def compute_spread(self) -> float:
        """How far apart the two passes' fwd_bwd medians may fall by chance, relative.

        Twice the standard error of their difference: each median's standard
        error taken as MEDIAN_SE x IQR / sqrt(steps) of its own pass (for
        normally spread steps, 1.2533 sigma / sqrt(n) with sigma = IQR / 1.349),
        relative to its median. A move beyond it is the host, not chance.
        """
        errors = []
        for iqr, median, n in ((self.prediction.terms.compute_iqr,
                                self.prediction.terms.compute.seconds,
                                self.prediction.terms.compute_steps),
                               (self.measured_compute_iqr, self.measured_phases["fwd_bwd"],
                                self.steps)):
            if iqr is None or median <= 0 or n < 1:
                return math.nan
            errors.append(MEDIAN_SE * (iqr[1] - iqr[0]) / median / math.sqrt(n))
        return 2 * math.hypot(*errors)

    @property
    def host_changed(self) -> bool:
        """The compute term moved by more than the passes' own spread (and over HOST_MOVED).

        The same device work took a different time in the two passes: the host
        changed between them (load, clock, another process), not the model.
        """
        moved, spread = abs(self.compute_moved), self.compute_spread
        return math.isfinite(moved) and math.isfinite(spread) and moved > max(spread, HOST_MOVED)

    @property
    def error_without_compute(self) -> float:
        """The error with the measured fwd_bwd in place of the model's: the rest of the model."""
        p = self.prediction.phases["fwd_bwd"]
        return (self.model_s - p + self.measured_phases["fwd_bwd"] - self.measured_s) \
            / self.measured_s

    def error_terms(self) -> str:
        """The error in words, term by term, largest share first (shares under 0.1 % left out)."""
        shares = sorted((r for r in self.split() if r["error"] is not None),
                        key=lambda r: -abs(r["error"]))
        return ", ".join(f"{r['phase']} {r['error'] * 100:+.1f} %" for r in shares
                         if abs(r["error"]) >= 0.001) or "every term within 0.1 %"

    def host_notice(self) -> str | None:
        """One plain sentence when the host changed between the passes, else None."""
        if not self.host_changed:
            return None
        moved = self.compute_moved
        return (f"the host changed between the passes: the same device compute (fwd_bwd) took "
                f"{abs(moved) * 100:.1f} % {'longer' if moved > 0 else 'less time'} in the asked "
                f"config than in the baseline (more than the passes' own spread allows, "
                f"{self.compute_spread * 100:.1f} %); the rest of the model is off by "
                f"{self.error_without_compute * 100:+.1f} %")

    def as_dict(self) -> dict:
        return {
            "measured_s": self.measured_s, "iqr_s": list(self.iqr), "steps": self.steps,
            "step_range": [self.first_step, self.last_step], "interleave": self.interleave,
            "paired": self.paired, "window": self.window,
            "model_s": self.model_s, "error": self.error,
            "measured_tokens_per_s": self.measured_tokens_per_s,
            "model_tokens_per_s": self.model_tokens_per_s,
            "worst_phase": self.worst_phase, "split": self.split(),
            "error_terms": self.error_terms(), "compute_moved": self.compute_moved,
            "compute_spread": self.compute_spread, "host_changed": self.host_changed,
            "error_without_compute": self.error_without_compute,
            "host_notice": self.host_notice(),
            "prediction": self.prediction.as_dict(),
        }


def relative_error(model_s: float | None, measured_s: float | None) -> float | None:
    """(model - measured) / measured, as in the reference record; None when either is missing."""
    if model_s is None or not measured_s:
        return None
    return (model_s - measured_s) / measured_s


def compare(prediction: Prediction, measured_steps: Steps, *,
            last: int | None = None, interleave: int = 0,
            paired: dict | None = None) -> Comparison:
    """The prediction against the median of the measured steps 6-N (6-``last`` if given).

    ``interleave`` says the passes alternated in blocks of that many steps;
    ``paired_window`` gives both for a run. ``last`` needs step dicts: for a
    stored pass, window it with ``stats.pass_stats(store, run, label, last=)``.
    ``paired`` (``paired_medians``) replaces the measured medians it has.
    """
    if last is not None:
        if isinstance(measured_steps, stats.PassStats):
            raise TypeError("compare(last=) needs step dicts; window a stored pass with "
                            "stats.pass_stats(..., last=)")
        measured_steps = [s for s in stats.steady(measured_steps) if s["step"] <= last]
    measured = _pass(measured_steps)
    if not measured.steady:
        raise ModelFitError("nothing to compare: the run has no steps")
    paired = paired or {}
    median_s = float(paired.get("step_s", measured.median_step_s))
    phases: dict[str, float] = {p: paired.get(p, measured.phase_medians[p]) for p in SPLIT[:-1]}
    phases["unclaimed"] = median_s - sum(phases.values())
    tokens_per_s = (measured.median_tokens / median_s if measured.median_tokens and median_s > 0
                    else measured.tokens_per_s)
    return Comparison(
        prediction=prediction, measured_s=median_s, iqr=measured.iqr_step_s,
        steps=measured.steady, first_step=measured.first_step, last_step=measured.last_step,
        measured_tokens_per_s=tokens_per_s or math.nan,
        measured_phases=phases, interleave=interleave,
        measured_compute_iqr=measured.fwd_bwd_iqr, paired="step_s" in paired,
    )


def paired_medians(baseline_steps: list[dict], main_steps: list[dict], block: int) -> dict:
    """The main pass's median step and phases, measured against the baseline block by block.

    For interleaved passes: block k of each pass (its steps kB+1 to kB+B) ran
    next to the other's block k, on the same host. Each pair's steps, both
    passes', are divided by the pair's own level (the median of the pair's
    steps); the main's median over all its divided steps, over the
    baseline's, is the ratio of the two passes on one host; times the
    baseline's median over the same steps, it is the main's step (or phase)
    on the baseline's host. On a steady host that is the main's own median,
    give or take the noise. When the host slows down (or speeds up) part-way
    through, the plain medians of the two passes can land on either side of
    the change (each pass has half its steps on each side, a block more or
    less); here every pair is measured against its own level, so only the
    pair that straddles the change is off. Steps 6-N only, as everywhere.
    A key the pairs cannot give (no pair, or a phase at 0 s in the baseline)
    is left out, so ``compare`` keeps the plain median for it.

    A block's first step is left out of the pair (blocks of 3 or more): the
    first step after a switch between the passes runs on caches the other
    model filled, a few percent slower, and in mirrored pairs every baseline
    block starts with a switch but only every other main block does.
    """
    skip = 1 if block >= 3 else 0

    def by_block(steps: list[dict]) -> dict[int, list[dict]]:
        out: dict[int, list[dict]] = {}
        for s in stats.steady(steps):
            out.setdefault((s["step"] - 1) // block, []).append(s)
        return out

    def values(steps: list[dict], key: str) -> list[float]:
        out = []
        for s in steps:
            v = s["step_s"] if key == "step_s" else (s.get("phases") or {}).get(key)
            if v is not None and (s["step"] - 1) % block >= skip:
                out.append(float(v))
        return out

    base, main = by_block(baseline_steps), by_block(main_steps)
    pairs = [k for k in base if k in main]
    out = {}
    for key in ("step_s", *SPLIT[:-1]):
        on_base, on_main = [], []
        for k in pairs:
            b, m = values(base[k], key), values(main[k], key)
            level = statistics.median(b + m) if b and m else 0.0
            if level > 0:
                on_base += [v / level for v in b]
                on_main += [v / level for v in m]
        whole = [float(s["step_s"] if key == "step_s" else (s.get("phases") or {}).get(key, 0.0))
                 for k in pairs for s in base[k]]
        if on_base and statistics.median(on_base) > 0:
            out[key] = (statistics.median(on_main) / statistics.median(on_base)
                        * statistics.median(whole))
    return out


def paired_window(main_config: dict | None, baseline_steps: Steps) -> dict:
    """``compare``'s window arguments for a run whose passes may have been interleaved.

    Interleaved, only the main steps that ran alongside the baseline's share
    its host: the window ends at the baseline's last step. One after the
    other, it is the whole main pass.
    """
    block = int((main_config or {}).get("interleave") or 0)
    if isinstance(baseline_steps, stats.PassStats):
        last = baseline_steps.step_span[1] if baseline_steps.step_span else None
    else:
        last = max((s["step"] for s in baseline_steps), default=None)
    if not block or last is None:
        return {}
    return {"last": last, "interleave": block}


# === Memory ==================================================================

#: Bytes per parameter on a card, by the trainer's placement (trainer/engine.py):
#: a resident layer keeps its fp32 master, gradient and AdamW's two moments on
#: the card; an offloaded layer keeps an fp32 compute copy and its gradient;
#: embedding, norm and head are resident on their cards.
RESIDENT_BYTES = 16
OFFLOADED_BYTES = 8
#: Card memory in GB by backend kind, where the kind fixes it (RNGD: 48 GB HBM3).
CARD_GB = {"furiosa": 48.0}


@dataclass(frozen=True)
class MemoryCheck:
    fits: bool
    need_gb: list  # per card: parameters, gradients and optimizer state
    card_gb: float | None
    message: str


def card_bytes(target: Shape, params_per_layer: int, edge: int = 0,
               tied_head: bool = False) -> list[int]:
    """Bytes of weights, gradients and optimizer state on each card (activations not counted)."""
    out = []
    for block in blocks(target.layers, target.cards):
        r = min(target.resident_per_card, block)
        n = params_per_layer * (RESIDENT_BYTES * r + OFFLOADED_BYTES * (block - r))
        out.append(n)
    if edge:
        # The embedding on the first card; norm and head on the last (the first when tied).
        if tied_head or target.cards == 1:
            out[0] += RESIDENT_BYTES * edge
        else:
            out[0] += RESIDENT_BYTES * (edge // 2)
            out[-1] += RESIDENT_BYTES * (edge - edge // 2)
    return out


def _gb(x: float) -> str:
    return f"{x:.1f}" if x >= 10 else f"{x:.3g}"


def memory_check(target: Shape, *, params_per_layer: int | None, card_gb: float | None,
                 edge: int = 0, tied_head: bool = False) -> MemoryCheck:
    """Whether C x R resident layers fit in each card's memory by the trainer's accounting."""
    if not params_per_layer:
        return MemoryCheck(True, [], card_gb,
                           "memory not checked: the baseline does not say its parameters per layer")
    need = [b / 1e9 for b in card_bytes(target, params_per_layer, edge, tied_head)]
    worst = max(range(len(need)), key=lambda c: need[c])
    if card_gb is None:
        return MemoryCheck(True, need, None, f"needs {_gb(need[worst])} GB on card {worst} "
                           "(weights, gradients, AdamW state); no card memory limit known")
    if need[worst] > card_gb:
        return MemoryCheck(False, need, card_gb, (
            f"{target.cards} x {target.resident_per_card} resident layers would not fit: card "
            f"{worst} needs {_gb(need[worst])} GB for weights, gradients and AdamW state "
            f"({RESIDENT_BYTES} B per resident and {OFFLOADED_BYTES} B per offloaded parameter, "
            f"{params_per_layer:,} per layer), more than its {card_gb:g} GB"))
    return MemoryCheck(True, need, card_gb, f"fits: card {worst} needs {_gb(need[worst])} GB "
                       f"of {card_gb:g} GB before activations")


#: Bytes per offloaded parameter in host memory (trainer/engine.py): its fp32
#: master, gradient and AdamW's two moments.
HOST_BYTES = 16
#: Backend kinds whose "cards" are the host itself: their card bytes are host bytes too.
HOST_PLAYS_CARD = ("cpu", "cpu-compiled", "cpu-perturbed")


def host_bytes(target: Shape, params_per_layer: int, *, edge: int = 0, tied_head: bool = False,
               host_plays_card: bool = False) -> int:
    """Bytes of host memory the placement needs: offloaded layers' masters, gradients, moments.

    When the host plays the cards (cpu backends) the cards' own bytes are host
    memory as well. Activations and the process itself are not counted, as in
    ``card_bytes``.
    """
    need = HOST_BYTES * params_per_layer * target.offloaded
    if host_plays_card:
        need += sum(card_bytes(target, params_per_layer, edge, tied_head))
    return need


def host_memory_check(target: Shape, *, params_per_layer: int | None, host_gb: float | None,
                      edge: int = 0, tied_head: bool = False,
                      host_plays_card: bool = False) -> MemoryCheck:
    """Whether the host holds what the placement puts there, by the trainer's accounting."""
    if not params_per_layer:
        return MemoryCheck(True, [], host_gb,
                           "host memory not checked: the baseline does not say its parameters "
                           "per layer")
    need = host_bytes(target, params_per_layer, edge=edge, tied_head=tied_head,
                      host_plays_card=host_plays_card) / 1e9
    what = "offloaded layers" + (" and the cards it plays" if host_plays_card else "")
    if host_gb is None:
        return MemoryCheck(True, [need], None,
                           f"host needs {_gb(need)} GB for the {what}; no host limit known")
    if need > host_gb:
        return MemoryCheck(False, [need], host_gb,
                           f"host would need {_gb(need)} GB for the {what}, more than its "
                           f"{host_gb:g} GB")
    return MemoryCheck(True, [need], host_gb,
                       f"fits: host needs {_gb(need)} GB of {host_gb:g} GB for the {what}")


def card_gb_for(backend: str | None) -> float | None:
    """The card memory the backend fixes (None: no fixed limit, e.g. cpu)."""
    first = str(backend or "cpu").split(",")[0].strip()
    return CARD_GB.get(first.split(":")[0])


# === From the store ==========================================================


def _pass_config(store, run_id: int, label: str) -> dict | None:
    for p in store.passes(run_id):
        if p["config_label"] == label:
            return p["config"]
    return None


@dataclass(frozen=True)
class Baseline:
    """An all-offload pass in the store: its numbers, start config and a label for sources."""

    run_id: int
    label: str  # the pass's config_label
    stats: stats.PassStats  # stats.pass_stats: medians over steps 6-N, its newest step
    config: dict

    @property
    def source(self) -> str:
        return f"run {self.run_id} {self.label}"

    @property
    def backend(self) -> str:
        return str(self.config.get("backend") or "cpu")


def baseline_of(store, run_id: int) -> Baseline | None:
    """The run's all-offload pass: its baseline pass, else its main pass if it has 0 resident."""
    for label in (BASELINE, MAIN):
        last = store.last_step(run_id, label)
        if last is None:
            continue
        config = _pass_config(store, run_id, label) or {}
        resident = _extra(last).get("resident_layers", config.get("resident_layers"))
        if label == BASELINE or resident == 0:
            return Baseline(run_id, label, stats.pass_stats(store, run_id, label), config)
    return None


def terms_for_run(store, run_id: int, *,
                  baseline: stats.PassStats | None = None) -> Terms | None:
    """Terms fitted from the run's own baseline pass; None when it has none.

    ``baseline``: the pass's ``stats.pass_stats`` when the caller has it already.
    """
    if baseline is None:
        if not store.pass_counts(run_id, BASELINE)[0]:
            return None
        baseline = stats.pass_stats(store, run_id, BASELINE)
    if not baseline.steps:
        return None
    return fit(baseline, _pass_config(store, run_id, BASELINE),
               baseline_label=f"run {run_id} baseline")


def for_run(store, run_id: int, *, main: stats.PassStats | None = None,
            baseline: stats.PassStats | None = None) -> Comparison | None:
    """The run's main pass against the model from its own baseline pass.

    None when the run has no baseline pass or no main steps yet. Raises
    ModelFitError when the baseline cannot give the terms. ``main`` and
    ``baseline``: the passes' ``stats.pass_stats`` when the caller has them.
    """
    if main is None:
        if not store.pass_counts(run_id, MAIN)[0]:
            return None
        main = stats.pass_stats(store, run_id, MAIN)
    if not main.steps:
        return None
    if baseline is None:
        if not store.pass_counts(run_id, BASELINE)[0]:
            return None
        baseline = stats.pass_stats(store, run_id, BASELINE)
    terms = terms_for_run(store, run_id, baseline=baseline)
    if terms is None:
        return None
    window = paired_window(_pass_config(store, run_id, MAIN), baseline)
    measured, paired = main, None
    if window:  # interleaved: the main steps that ran beside the baseline's, read as steps
        last, block = window["last"], window["interleave"]
        measured = stats.pass_stats(store, run_id, MAIN, last=last)
        paired = paired_medians(store.steps_until(run_id, BASELINE, last),
                                store.steps_until(run_id, MAIN, last), block)
    return compare(predict(terms, Shape.of_step(main.last)), measured,
                   interleave=window.get("interleave", 0), paired=paired)


@dataclass(frozen=True)
class Answer:
    """What ``rngdctl model`` prints: a prediction and whether the config fits."""

    baseline: Baseline
    prediction: Prediction
    memory: MemoryCheck
    host_memory: MemoryCheck | None = None  # only when the caller gave the host's memory

    def as_dict(self) -> dict:
        out = {"baseline_run": self.baseline.run_id, "baseline_pass": self.baseline.label,
               **self.prediction.as_dict(), "memory": asdict(self.memory)}
        if self.host_memory is not None:
            out["host_memory"] = asdict(self.host_memory)
        return out


def model_config(store, baseline_run: int, *, cards: int, resident: int,
                 seq_len: int | None = None, accum: int | None = None,
                 card_gb: float | None = None, resident_run: int | None = None,
                 host_gb: float | None = None, check_host: bool = False) -> Answer:
    """Predict a config that has not run, from a stored run's all-offload pass.

    ``card_gb`` overrides the card memory the baseline's backend implies;
    ``resident_run`` names a run whose main pass (with resident layers) gives
    the device optimizer's cost per layer. With ``check_host`` the answer also
    says whether the host holds the offloaded layers (``host_gb``: its memory,
    None when unknown).
    """
    base = baseline_of(store, baseline_run)
    if base is None:
        raise ModelFitError(f"cannot fit: run {baseline_run} has no all-offload pass "
                            "(submit it with --baseline, or with --resident 0)")
    resident_steps = None
    if resident_run is not None:
        if not store.pass_counts(resident_run, MAIN)[0]:
            raise ModelFitError(f"cannot fit: run {resident_run} has no main-pass steps")
        resident_steps = stats.pass_stats(store, resident_run, MAIN)
    terms = fit(base.stats, base.config, resident_steps=resident_steps,
                baseline_label=base.source, resident_label=f"run {resident_run} main")
    b = terms.baseline
    target = Shape(layers=b.layers, cards=cards, resident_per_card=resident,
                   accum=accum or b.accum, seq_len=seq_len or b.seq_len,
                   micro_batch=b.micro_batch)
    config = base.config
    ppl = _extra(base.stats.last).get("params_per_layer") or config.get("params_per_layer")
    memory = memory_check(target, params_per_layer=ppl,
                          card_gb=card_gb if card_gb is not None else card_gb_for(base.backend),
                          edge=edge_params(config) or 0, tied_head=bool(config.get("tied_head")))
    host = None
    if check_host:
        kind = base.backend.split(",")[0].split(":")[0].strip()
        host = host_memory_check(target, params_per_layer=ppl, host_gb=host_gb,
                                 edge=edge_params(config) or 0,
                                 tied_head=bool(config.get("tied_head")),
                                 host_plays_card=kind in HOST_PLAYS_CARD)
    return Answer(base, predict(terms, target), memory, host)


def hardware_of(store, run_id: int) -> str:
    """What the run ran on, for the step-model table: backend kind and host."""
    config = _pass_config(store, run_id, MAIN) or {}
    kinds = [b.split(":")[0].strip() for b in str(config.get("backend") or "cpu").split(",")]
    host = store.run(run_id).get("host")
    kind = kinds[0] if len(set(kinds)) == 1 else "+".join(kinds)
    return f"{kind} ({host})" if host else kind


# === The step-model table in docs/design.md ==================================

TABLE_BEGIN = "<!-- step-model-table:begin -->"
TABLE_END = "<!-- step-model-table:end -->"
TABLE_HEADER = ("| run | hardware | cards | resident | measured | model | error |\n"
                "| --- | --- | --- | --- | --- | --- | --- |")


@dataclass(frozen=True)
class DesignRow:
    """One measured config in the step-model table."""

    run: str
    hardware: str
    cards: int
    resident: int  # per card
    measured_s: float
    model_s: float
    error: float  # fraction

    def key(self) -> tuple:
        return (self.run, self.hardware, self.cards, self.resident)

    def markdown(self) -> str:
        return (f"| {self.run} | {self.hardware} | {self.cards} | {self.resident} | "
                f"{format_seconds(self.measured_s)} | {format_seconds(self.model_s)} | "
                f"{format_error(self.error)} |")


def design_row(comparison: Comparison, *, run: str, hardware: str) -> DesignRow:
    target = comparison.prediction.target
    return DesignRow(run, hardware, target.cards, target.resident_per_card,
                     comparison.measured_s, comparison.model_s, comparison.error)


def format_seconds(s: float) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    return f"{s:.2f} s" if s >= 1 else f"{s * 1000:.1f} ms"


def format_error(e: float | None) -> str:
    if e is None or not math.isfinite(e):
        return "–"
    return f"{e * 100:+.1f} %"


_ROW = re.compile(r"^\|\s*(?P<run>[^|]*?)\s*\|\s*(?P<hw>[^|]*?)\s*\|\s*(?P<cards>\d+)\s*\|"
                  r"\s*(?P<res>\d+)\s*\|")


def _merge(lines: list[str], rows: Iterable[DesignRow]) -> list[str]:
    new = {r.key(): r.markdown() for r in rows}
    out = []
    for line in lines:
        m = _ROW.match(line)
        key = (m["run"], m["hw"], int(m["cards"]), int(m["res"])) if m else None
        if key in new:
            out.append(new.pop(key))
        elif m:
            out.append(line)
    return out + list(new.values())


def update_design_table(design_md_path: str | Path, rows: Iterable[DesignRow]) -> int:
    """Add ``rows`` to the step-model table in docs/design.md; returns the table's row count.

    The table lives between TABLE_BEGIN and TABLE_END. A row with the same run,
    hardware, cards and resident as an existing one replaces it; other rows
    stay. Without the markers, the table goes at the end of the "## Step-time
    model" section, or at the end of the file.
    """
    path = Path(design_md_path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelFitError(f"cannot read {path}: {exc.strerror}") from None
    if TABLE_BEGIN in text and TABLE_END in text:
        head, rest = text.split(TABLE_BEGIN, 1)
        body, tail = rest.split(TABLE_END, 1)
    else:
        head, body, tail = _insertion_point(text)
    lines = _merge(body.strip().splitlines(), rows)
    block = f"{TABLE_BEGIN}\n{TABLE_HEADER}\n" + "".join(f"{line}\n" for line in lines) + TABLE_END
    try:
        path.write_text(head + block + tail, encoding="utf-8")
    except OSError as exc:
        raise ModelFitError(f"cannot write {path}: {exc.strerror}") from None
    return len(lines)


def _insertion_point(text: str) -> tuple[str, str, str]:
    m = re.search(r"^## Step-time model.*$", text, flags=re.MULTILINE)
    if not m:
        sep = "" if text.endswith("\n") or not text else "\n"
        return text + sep + "\n", "", "\n"
    nxt = re.search(r"^## ", text[m.end():], flags=re.MULTILINE)
    cut = m.end() + nxt.start() if nxt else len(text)
    before = text[:cut].rstrip("\n") + "\n\n"
    after = "\n\n" + text[cut:] if nxt else "\n"
    return before, "", after


__all__ = [
    "Answer", "Baseline", "Comparison", "DesignRow", "MemoryCheck", "Prediction", "Shape",
    "Term", "Terms", "baseline_of", "card_gb_for", "compare", "design_row", "fit", "for_run",
    "hardware_of", "host_memory_check", "memory_check", "model_config", "predict", "terms_for_run",
    "update_design_table",
]
