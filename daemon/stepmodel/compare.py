"""A prediction against what was measured: the error, its 95 % interval, its terms, the host.

One verdict (docs/design.md, "The verdict: the error and its interval"): the
error with its 95 % interval, 1.96 standard errors of the two passes' ratio
from the run's own step-to-step spread, and one rule, from the same interval,
for saying the host changed between the passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from daemon.errors import ModelFitError
from daemon.stepmodel.fit import SPLIT, Prediction, Steps, _pass

#: The two figures the measured step can be (``Comparison.measured_name``).
PAIRED, MEDIAN = "paired estimate", "median"
#: Standard errors either side of the error in its 95 % interval (a normal ratio).
Z95 = 1.96
#: A median's standard error per IQR / sqrt(n): 1.2533 sigma / sqrt(n) for normally
#: spread values, with sigma = IQR / 1.349.
MEDIAN_SE = 1.2533 / 1.349


def median_se(iqr: tuple[float, float] | None, median: float, n: int) -> float:
    """A median's standard error, relative to it (NaN without a spread to read)."""
    if iqr is None or median is None or median <= 0 or n < 2:
        return math.nan
    return MEDIAN_SE * (iqr[1] - iqr[0]) / median / math.sqrt(n)


@dataclass(frozen=True)
class Comparison:
    prediction: Prediction
    measured_s: float  # over steps 6-N: the paired estimate, else the median (measured_name)
    iqr: tuple[float, float]  # quartiles of the same steps
    steps: int  # how many steps the median is over
    first_step: int
    last_step: int
    measured_tokens_per_s: float
    measured_phases: dict  # SPLIT -> median seconds
    interleave: int = 0  # block size when the passes alternated; 0: one after the other
    measured_compute_iqr: tuple[float, float] | None = None  # quartiles of the main's fwd_bwd
    #: Paired block by block with the baseline (``pairing.paired``): the standard error of
    #: each key's paired ratio.
    paired_se: dict = field(default_factory=dict)

    @property
    def window(self) -> str:
        """Which steps the measured figure is over, in words."""
        steps = (f"steps {self.first_step}-{self.last_step}" if self.last_step > self.first_step
                 else f"step {self.first_step}")
        if self.interleave:
            steps += f", interleaved with the baseline in blocks of {self.interleave}"
        return steps

    @property
    def paired(self) -> bool:
        """Whether ``measured_s`` is the paired estimate (``pairing.paired``), not a median."""
        return "step_s" in self.paired_se

    @property
    def measured_name(self) -> str:
        """Which figure ``measured_s`` is, as every label names it: the paired estimate
        (each step over its block pair's level, so the host's drift cancels), or the
        median of the measured steps. They differ by up to the host's drift: one run
        must never show the one under the other's name."""
        return PAIRED if self.paired else MEDIAN

    @property
    def measured_words(self) -> str:
        """``measured_name`` with its window: "paired estimate of steps 6-60, ..."."""
        return f"{self.measured_name} of {self.window}"

    @property
    def model_s(self) -> float:
        return self.prediction.step_s

    @property
    def error(self) -> float:
        """(model - measured) / measured, as a fraction."""
        return relative_error(self.model_s, self.measured_s)

    def standard_error(self, key: str = "step_s") -> float:
        """The relative standard error of measured over model for the step (or the fwd_bwd
        phase): the paired ratio's where the passes interleaved (``pairing.paired``), else
        each pass's median's from its own quartiles (the model's is the baseline's),
        combined. NaN where a pass has no spread to read."""
        if key in self.paired_se:
            return self.paired_se[key]
        terms = self.prediction.terms
        if key == "step_s":
            base = median_se(terms.baseline_iqr, terms.baseline_median_s, terms.compute_steps)
            main = median_se(self.iqr, self.measured_s, self.steps)
        else:
            base = median_se(terms.compute_iqr, terms.compute.seconds, terms.compute_steps)
            main = median_se(self.measured_compute_iqr, self.measured_phases[key], self.steps)
        return math.hypot(base, main)

    @property
    def interval(self) -> float:
        """The error's 95 % interval, its half-width as a fraction: Z95 standard errors."""
        return Z95 * self.standard_error()

    @property
    def compute_interval(self) -> float:
        """``interval``'s rule for the device compute: how far it may move by chance."""
        return Z95 * self.standard_error("fwd_bwd")

    @property
    def model_tokens_per_s(self) -> float:
        tokens = self.measured_tokens_per_s * self.measured_s
        return tokens / self.model_s if self.model_s > 0 else math.nan

    @property
    def worst_phase(self) -> str:
        """The phase whose prediction is furthest from its measured median."""
        return max(SPLIT, key=lambda p: abs(self.prediction.phases[p]
                                            - self.measured_phases.get(p, 0.0)))

    def split(self) -> list[dict]:
        """Predicted and measured seconds per phase, side by side, with each phase's share of
        the error (``share``), (model - measured) / measured step: the shares add up to
        ``error``. Not the phase's own error: a phase 50 % off that takes 1 % of the step
        has a share of 0.5 %."""
        out = []
        for p in SPLIT:
            model, measured = self.prediction.phases[p], self.measured_phases.get(p, 0.0)
            out.append({"phase": p, "model_s": model, "measured_s": measured,
                        "diff_s": model - measured,
                        "share": (model - measured) / self.measured_s if self.measured_s
                        else None})
        return out

    @property
    def compute_moved(self) -> float:
        """Measured device compute over the model's, less 1: the same work timed twice (the
        model scales the baseline's by tokens and layers only)."""
        model = self.prediction.phases["fwd_bwd"]
        return self.measured_phases["fwd_bwd"] / model - 1 if model > 0 else math.nan

    @property
    def host_changed(self) -> bool:
        """The device compute moved outside its 95 % interval (``compute_interval``): the
        same work took a different time in the two passes, so the host changed between
        them (load, clock, another process), not the model."""
        moved, interval = self.compute_moved, self.compute_interval
        return math.isfinite(moved) and math.isfinite(interval) and abs(moved) > interval

    @property
    def error_of_rest(self) -> float:
        """The error with the measured compute in place of the model's where the host
        changed (``host_changed``): the rest of the model."""
        moved = self.measured_phases["fwd_bwd"] - self.prediction.phases["fwd_bwd"]
        return (self.model_s + moved * self.host_changed - self.measured_s) / self.measured_s

    def error_terms(self) -> str:
        """The error in words, term by term, largest share first (shares under 0.1 % left out)."""
        shares = sorted((r for r in self.split() if r["share"] is not None),
                        key=lambda r: -abs(r["share"]))
        return ", ".join(f"{r['phase']} {r['share'] * 100:+.1f} %" for r in shares
                         if abs(r["share"]) >= 0.001) or "every term within 0.1 %"

    def verdict(self) -> str:
        """The error with its interval in words: "+3.0 % (95 % interval ±1.1 %)"."""
        return format_verdict(self.error, self.interval)

    def host_notice(self) -> str | None:
        """One plain sentence when the host changed between the passes (``show``, the note)."""
        if not self.host_changed:
            return None
        moved = self.compute_moved
        return (f"the host changed between the passes: the same device compute (fwd_bwd) took "
                f"{abs(moved) * 100:.1f} % {'longer' if moved > 0 else 'less time'} in the "
                f"asked config than in the baseline, outside its 95 % interval "
                f"(±{self.compute_interval * 100:.1f} %); the rest of the model is off by "
                f"{self.error_of_rest * 100:+.1f} %")

    def short_notice(self) -> str | None:
        """``host_notice`` in one panel line (the TUI)."""
        if not self.host_changed:
            return None
        return (f"host changed: compute {self.compute_moved * 100:+.1f} % "
                f"(±{self.compute_interval * 100:.1f} %), rest of the model "
                f"{self.error_of_rest * 100:+.1f} %")

    def as_dict(self) -> dict:
        return {
            "measured_s": self.measured_s, "iqr_s": list(self.iqr), "steps": self.steps,
            "step_range": [self.first_step, self.last_step], "interleave": self.interleave,
            "paired": self.paired, "window": self.window,
            "measured_name": self.measured_name, "measured_words": self.measured_words,
            "model_s": self.model_s, "error": self.error, "interval": finite(self.interval),
            "measured_tokens_per_s": self.measured_tokens_per_s,
            "model_tokens_per_s": self.model_tokens_per_s,
            "worst_phase": self.worst_phase, "split": self.split(),
            "error_terms": self.error_terms(), "compute_moved": self.compute_moved,
            "compute_interval": finite(self.compute_interval),
            "host_changed": self.host_changed, "error_of_rest": self.error_of_rest,
            "host_notice": self.host_notice(),
            "prediction": self.prediction.as_dict(),
        }


def finite(x: float) -> float | None:
    """``x``, or None where it is not finite (an interval nothing could bound): JSON's and
    the TUI's unknown."""
    return x if math.isfinite(x) else None


def relative_error(model_s: float | None, measured_s: float | None) -> float | None:
    """(model - measured) / measured, as in the reference record; None when either is missing."""
    if model_s is None or not measured_s:
        return None
    return (model_s - measured_s) / measured_s


def compare(prediction: Prediction, measured_steps: Steps, *, interleave: int = 0,
            paired: tuple[dict, dict] | None = None) -> Comparison:
    """The prediction against the median of the measured steps 6-N. ``interleave``: the
    passes alternated in blocks of that many steps; ``paired`` (``pairing.paired``'s medians
    and their standard errors) replaces the medians it has."""
    measured = _pass(measured_steps)
    if not measured.steady:
        raise ModelFitError("nothing to compare: the run has no steps")
    medians, errors = paired or ({}, {})
    median_s = float(medians.get("step_s", measured.median_step_s))
    phases: dict[str, float] = {p: medians.get(p, measured.phase_medians[p]) for p in SPLIT[:-1]}
    phases["unclaimed"] = median_s - sum(phases.values())
    tokens_per_s = (measured.median_tokens / median_s if measured.median_tokens and median_s > 0
                    else measured.tokens_per_s)
    return Comparison(
        prediction=prediction, measured_s=median_s, iqr=measured.iqr_step_s,
        steps=measured.steady, first_step=measured.first_step, last_step=measured.last_step,
        measured_tokens_per_s=tokens_per_s or math.nan, measured_phases=phases,
        interleave=interleave, measured_compute_iqr=measured.fwd_bwd_iqr, paired_se=errors,
    )


def format_seconds(s: float) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    return f"{s:.2f} s" if s >= 1 else f"{s * 1000:.1f} ms"


def format_error(e: float | None) -> str:
    if e is None or not math.isfinite(e):
        return "–"
    return f"{e * 100:+.1f} %"


def format_verdict(error: float | None, interval: float | None) -> str:
    """The error with its 95 % interval, as ``show`` and the note give it: "+3.0 % (95 %
    interval ±1.1 %)"; without an interval (a pass too short to spread), says so."""
    if interval is None or not math.isfinite(interval):
        return f"{format_error(error)} (no interval: too few steps)"
    return f"{format_error(error)} (95 % interval ±{interval * 100:.1f} %)"
