"""The model's form (docs/design.md, "Form"): its terms fitted from a baseline pass, and the
prediction of any config."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from daemon.errors import ModelFitError
from daemon.stepmodel import stats
from daemon.stepmodel.memory import host_plays_cards
from daemon.stepmodel.shape import Shape
from trainer import footprint
from trainer.records import OPTIM_CALIBRATION

#: The phases the model needs in the baseline, with the words its error uses.
NEEDED = {"fwd_bwd": "device compute (fwd_bwd)", "upload": "upload", "download": "download",
          "host_optim": "host optimizer (host_optim)",
          "device_optim": "device optimizer (device_optim)"}
#: Phases that may be missing (taken as zero).
OPTIONAL = ("wait",)
#: The split's keys, in display order. ``unclaimed`` is the part of a step that
#: no phase claimed (step_s minus the sum of the phases).
SPLIT = ("fwd_bwd", "upload", "download", "host_optim", "device_optim", "wait", "unclaimed")

#: A term whose source starts with this was not measured.
ESTIMATED = "estimated"
#: The ``Terms`` fields that are terms, in display order: what the form reads.
_TERMS = ("compute", "upload", "download", "host_optim_fixed", "host_optim", "host_optim_call",
          "device_optim_fixed", "device_optim", "wait", "unclaimed")
#: Where the host optimizer has no fixed part (no calibration to split it).
_UNSPLIT = "none: the host optimizer is priced per layer alone"


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
    #: F: the host optimizer's part that does not grow with the offloaded layers
    #: (the call, the clip norm's reduction, the first touch after the backward).
    host_optim_fixed: Term = Term("host_optim_fixed", 0.0, "step with offloaded layers", _UNSPLIT)
    #: c: the host optimizer call's own cost (calibrated, warm): with no layer
    #: offloaded the call goes, the rest of F moves to the cards' optimizer.
    host_optim_call: Term = Term("host_optim_call", 0.0, "step with offloaded layers", _UNSPLIT)

    def all(self) -> list[Term]:
        return [getattr(self, f) for f in _TERMS]

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


def median_words(p: stats.PassStats) -> str:
    """Which steps a pass's median is over: "median of steps 6-60" (the note's, the terms')."""
    first, last = p.first_step, p.last_step
    return f"median of steps {first}-{last}" if last > first else f"step {first}"


def edge_params(config: dict | None) -> int | None:
    """Parameters always on the cards (embedding, final norm, head) from a start config."""
    if not config:
        return None
    vocab, hidden = config.get("vocab_size"), config.get("hidden_size")
    if not isinstance(vocab, int) or not isinstance(hidden, int):
        return None
    return footprint.edge_params(vocab, hidden, bool(config.get("tied_head")))


def _seconds(cal: dict, key: str) -> float | None:
    v = cal.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def _host_optimizer(host_s: float, off: int, cal: dict, where: str) -> tuple[Term, Term, Term]:
    """The host optimizer's terms: F (per step), h (per offloaded layer) and c (its call).
    h is calibrated and F the rest of the baseline's; without a calibration (or with one
    that leaves F below 0) the whole phase is priced per layer."""
    per_layer, call = _seconds(cal, "host_per_layer_s"), _seconds(cal, "host_call_s")
    if per_layer is None or per_layer * off > host_s:
        none = f"{_UNSPLIT} (the baseline has no usable optimizer calibration)"
        return (Term("host_optim_fixed", 0.0, "step with offloaded layers", none),
                Term("host_optim", host_s / off, "offloaded layer", where),
                Term("host_optim_call", 0.0, "step with offloaded layers", none))
    pairs = f"median of {cal.get('reps')} pairs (the baseline's start record)"
    fixed = host_s - per_layer * off
    return (Term("host_optim_fixed", fixed, "step with offloaded layers",
                 f"{where}, less {off} x the calibrated cost per layer"),
            Term("host_optim", per_layer, "offloaded layer",
                 f"calibrated: one more layer of the host's fused AdamW on scratch buffers, {pairs}"),
            Term("host_optim_call", min(call or 0.0, fixed), "step with offloaded layers",
                 f"calibrated: the host optimizer call's own cost, {pairs}"))


def _device_per_layer(g: float, cal: dict, backend: str | None) -> Term:
    """The cards' optimizer per resident layer: card 0's calibration, ``g``; where the cards
    are the host, the lower of card 0's and the host's (the same work timed twice, and
    interference only adds time: docs/design.md, "Terms")."""
    host = _seconds(cal, "host_per_layer_s")
    if host is not None and host < g and host_plays_cards(backend):
        return Term("device_optim", host, "resident layer",
                    f"calibrated: one more layer of the host's fused AdamW on scratch buffers, "
                    f"median of {cal.get('reps')} pairs, below card 0's {g * 1e3:.3f} ms (the "
                    f"cards are the host: the same work timed twice, the lower one is the cost)")
    return Term("device_optim", g, "resident layer",
                f"calibrated: one more layer of card 0's optimizer on scratch buffers, median of "
                f"{cal.get('device_reps')} pairs (the baseline's start record)")


def _moved_to_cards(fixed: float, call: float) -> float:
    """What the cards' optimizer takes over when no layer is offloaded: F less the call (the
    first optimizer call after the backward finds caches cold; with no host call, the
    cards' first call pays it)."""
    return max(fixed - call, 0.0)


def fit(baseline_steps: Steps, baseline_config: dict | None = None, *,
        resident_steps: Steps | None = None, baseline_label: str = "baseline",
        resident_label: str = "resident pass") -> Terms:
    """Fit the terms from an all-offload baseline's steps (medians over steps 6-N).

    ``baseline_config``, the pass's start config, fills in the shape where the
    step records lack it and carries the optimizer calibration;
    ``resident_steps`` (a pass with resident layers, same hardware and model)
    gives the device optimizer's cost per layer.
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
    where = f"{baseline_label}, {median_words(base)}"
    off = shape.offloaded

    cal = (baseline_config or {}).get(OPTIM_CALIBRATION)
    cal = cal if isinstance(cal, dict) else {}
    host_fixed, host, host_call = _host_optimizer(med["host_optim"], off, cal, where)
    resident = _pass(resident_steps)
    g = _seconds(cal, "device_per_layer_s")
    if resident is not None and resident.steps:
        rshape = Shape.of_step(resident.last)
        if not rshape.resident:
            raise ModelFitError(f"cannot fit: the {resident_label} has no resident layers")
        rmed = _phase_medians(resident, resident_label)
        # With no layer offloaded, the pass's cards took over the host optimizer's first touch.
        moved = 0.0 if rshape.offloaded else _moved_to_cards(host_fixed.seconds, host_call.seconds)
        per_layer = (rmed["device_optim"] - med["device_optim"] - moved) / rshape.resident
        device = Term("device_optim", max(per_layer, 0.0), "resident layer",
                      f"{resident_label}, {median_words(resident)}, less the baseline's embed and head")
    elif g is not None:
        device = _device_per_layer(g, cal, (baseline_config or {}).get("backend"))
    else:
        device = Term("device_optim", host.seconds, "resident layer",
                      f"{ESTIMATED}: equal to the host optimizer per layer, "
                      "for want of a resident pass or a calibration")

    return Terms(
        baseline=shape,
        compute=Term("fwd_bwd", med["fwd_bwd"], "step at the baseline's tokens and layers", where),
        upload=Term("upload", med["upload"] / off, "offloaded layer", where),
        download=Term("download", med["download"] / off, "offloaded layer", where),
        host_optim=host,
        host_optim_fixed=host_fixed,
        host_optim_call=host_call,
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


def _form(v: dict[str, float], b: Shape, target: Shape) -> dict[str, float]:
    """The form (docs/design.md, "Form") with the terms' values ``v`` (by ``Terms`` field):
    ``target``'s phases."""
    work = (target.tokens / b.tokens) * (target.layers / b.layers)
    off = target.offloaded
    moved = 0.0 if off else _moved_to_cards(v["host_optim_fixed"], v["host_optim_call"])
    return {
        "fwd_bwd": v["compute"] * work,
        "upload": v["upload"] * off,
        "download": v["download"] * off,
        "host_optim": v["host_optim_fixed"] + v["host_optim"] * off if off else 0.0,
        "device_optim": v["device_optim_fixed"] + v["device_optim"] * target.resident + moved,
        "wait": v["wait"],
        "unclaimed": v["unclaimed"],
    }


def predict(terms: Terms, target: Shape) -> Prediction:
    """The step time of ``target`` from ``terms``: the form (``_form``)."""
    b = terms.baseline
    phases = _form({f: getattr(terms, f).seconds for f in _TERMS}, b, target)
    tokens = terms.baseline_tokens * target.tokens / b.tokens
    return Prediction(target, sum(phases.values()), tokens, phases, terms)


def predict_step(prediction: Prediction, baseline_step: dict) -> dict[str, float] | None:
    """What one baseline step says ``prediction``'s target takes: its phases and ``step_s``.

    ``predict``'s form with the step's own phases in place of the baseline's
    medians (a term from another pass or the calibration stays as fitted), so
    that paired block by block (``pairing.paired``) every term comes from the
    baseline steps beside the config's. None when the step lacks a phase.
    """
    terms, b = prediction.terms, prediction.terms.baseline
    phases = baseline_step.get("phases") or {}
    if any(phases.get(p) is None for p in NEEDED) or baseline_step.get("step_s") is None:
        return None
    have = {p: float(phases.get(p) or 0.0) for p in (*NEEDED, *OPTIONAL)}
    off = b.offloaded
    # Split (calibrated): the cost per layer stays, the step's fixed part is its own
    # host optimizer less that. Not split: the whole phase per layer, this step's.
    split = terms.host_optim_fixed.seconds > 0
    per_layer = terms.host_optim.seconds if split else have["host_optim"] / off
    v = {"compute": have["fwd_bwd"], "upload": have["upload"] / off,
         "download": have["download"] / off, "host_optim": per_layer,
         "host_optim_fixed": max(have["host_optim"] - per_layer * off, 0.0),
         "host_optim_call": terms.host_optim_call.seconds,
         "device_optim_fixed": have["device_optim"],
         # Estimated from the host optimizer per layer: it follows this step's host optimizer.
         "device_optim": per_layer if terms.device_optim.estimated else terms.device_optim.seconds,
         "wait": have["wait"],
         "unclaimed": float(baseline_step["step_s"]) - sum(have.values())}
    out = _form(v, b, prediction.target)
    return {**out, "step_s": sum(out.values())}
