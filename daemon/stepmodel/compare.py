"""A prediction against what was measured: the error, its split into terms and the host notice."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from daemon import stats
from daemon.errors import ModelFitError
from daemon.stepmodel.fit import NEEDED, PER_LAYER, SPLIT, Prediction, Steps, _pass

#: The least move of the compute term that counts as the host changing between
#: the passes, whatever their spread: below it, the notice would fire on the
#: few-percent differences one process's two passes show on a quiet host.
HOST_MOVED = 0.02
#: The model's worst error on a quiet host, single runs (docs/performance.md,
#: "Step-time model"). An error past it that no moved term explains, on a host
#: whose passes may differ by more than it by chance, gets the busy-host notice:
#: the user is told the error is inside this host's noise, not the model's.
QUIET_ERROR = 0.03
#: On the cpu backend a config with resident layers computes up to this much
#: faster than the all-offload baseline by itself (docs/design.md, "Compute and
#: placement on the cpu backend"; the all-resident tiny-llama rows of stop 14's
#: quiet windows moved -0.4 to -3.4 %, -2.0 % on average): a compute that moved
#: down by no more than this gets the placement named beside the host.
CPU_PLACEMENT = 0.035
#: A median's standard error per IQR / sqrt(n), for normally spread values.
MEDIAN_SE = 1.2533 / 1.349


def median_se(iqr: tuple[float, float] | None, median: float, n: int) -> float:
    """A median's standard error relative to it: MEDIAN_SE x IQR / sqrt(n) / median.

    For normally spread values, 1.2533 sigma / sqrt(n) with sigma = IQR / 1.349.
    NaN without quartiles, a positive median or a value.
    """
    if iqr is None or median <= 0 or n < 1:
        return math.nan
    return MEDIAN_SE * (iqr[1] - iqr[0]) / median / math.sqrt(n)
#: The terms the host notice watches: the same work in both passes, so that a
#: move is the host's. fwd_bwd always (the same tokens and layers, scaled);
#: upload, download and the host optimizer per offloaded layer, where the
#: asked config offloads any. Not the device optimizer: per resident layer it
#: is calibrated on scratch buffers or estimated (a miss there is the
#: model's), nor wait and the unclaimed rest, which no phase's work explains.
WATCHED = ("fwd_bwd", *PER_LAYER)


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
    #: The main's numbers over the same steps, for the quartiles of a phase the
    #: host notice weighs (``spread``): read only then.
    measured_pass: stats.PassStats | None = field(default=None, compare=False, repr=False)
    #: The cards are the host's CPU (the cpu backend): their compute shares the
    #: host's caches with the offloaded layers' copies and optimizer.
    cards_on_host: bool = False
    #: Interleaved: each phase's ``spread`` over the paired steps (``pairing.paired``).
    paired_spreads: dict = field(default_factory=dict)

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

    def moved(self, phase: str) -> float:
        """Measured over predicted, less 1, for one phase (NaN where the model has none)."""
        model = self.prediction.phases[phase]
        return self.measured_phases[phase] / model - 1 if model > 0 else math.nan

    @property
    def compute_moved(self) -> float:
        """Measured device compute over the model's, less 1: the same work measured twice.

        The model scales the baseline's fwd_bwd by tokens and layers only, so
        on a steady host this is near 0 whatever the placement.
        """
        return self.moved("fwd_bwd")

    @property
    def compute_spread(self) -> float:
        """How far apart the two passes' fwd_bwd medians may fall by chance, relative."""
        return self.spread("fwd_bwd")

    @cached_property
    def _spreads(self) -> dict:
        return {}

    def spread(self, phase: str) -> float:
        """How far apart the two passes' medians of ``phase`` may fall by chance, relative.

        Twice the standard error of their difference: each median's standard
        error taken as MEDIAN_SE x IQR / sqrt(steps) of its own pass (for
        normally spread steps, 1.2533 sigma / sqrt(n) with sigma = IQR / 1.349),
        relative to its median. A move beyond it is the host, not chance.
        Interleaved, the passes' paired steps' (``paired_spreads``): their
        steps divided by their block pair's level, so a host that changed
        part-way through, which the pairs take out, does not widen it.
        Computed once a phase: a per-layer phase's quartiles are indexed reads.
        """
        if phase not in self._spreads:
            self._spreads[phase] = self._spread(phase)
        return self._spreads[phase]

    def _spread(self, phase: str) -> float:
        """``spread``, uncached."""
        if phase in self.paired_spreads:
            return self.paired_spreads[phase]
        terms = self.prediction.terms
        if phase == "step_s":
            base = (terms.baseline_iqr, terms.baseline_median_s)
            main = (self.iqr, self.measured_s)
        elif phase == "fwd_bwd":
            base = (terms.compute_iqr, terms.compute.seconds)
            main = (self.measured_compute_iqr, self.measured_phases[phase])
        else:
            base = (terms.phase_iqr(phase), terms.baseline_phase_s(phase))
            main = (self.measured_pass.phase_iqr(phase) if self.measured_pass else None,
                    self.measured_phases[phase])
        return 2 * math.hypot(median_se(*base, terms.compute_steps),
                              median_se(*main, self.steps))

    @property
    def step_spread(self) -> float:
        """How far apart the two passes' median steps may fall by chance (``spread``'s rule).

        The whole step's, which is what the error measures: a host that slows
        every phase, not only the compute, shows here.
        """
        return self.spread("step_s")

    def moved_terms(self) -> list[str]:
        """The watched terms (``WATCHED``) that moved between the passes beyond chance."""
        return list(self._moved)

    @cached_property
    def _moved(self) -> tuple[str, ...]:
        """``moved_terms``, computed once.

        fwd_bwd: by more than the passes' own spread and over HOST_MOVED.
        A per-layer term: by more than its spread, and by more than HOST_MOVED
        of the step (a small phase's few percent, its per-layer cost not quite
        linear in the layers, is the model's, and would not move the error).
        """
        out = []
        for phase in WATCHED:
            moved = abs(self.moved(phase))
            share = abs(self.prediction.phases[phase] - self.measured_phases[phase]) \
                / self.measured_s
            if not math.isfinite(moved) or \
                    not (moved > HOST_MOVED if phase == "fwd_bwd" else share > HOST_MOVED):
                continue  # before the spread: a per-layer phase's quartiles are read for it
            spread = self.spread(phase)
            if math.isfinite(spread) and moved > spread:
                out.append(phase)
        return tuple(out)

    @property
    def host_changed(self) -> bool:
        """A watched term moved by more than the passes' own spread (``moved_terms``).

        The same work took a different time in the two passes: the host changed
        between them (load, clock, another process), not the model.
        """
        return bool(self.moved_terms())

    def error_without(self, phases: list[str]) -> float:
        """The error with the measured ``phases`` in place of the model's: the rest of the model."""
        model = self.model_s + sum(self.measured_phases[p] - self.prediction.phases[p]
                                   for p in phases)
        return (model - self.measured_s) / self.measured_s

    @property
    def error_without_compute(self) -> float:
        """The error with the measured fwd_bwd in place of the model's: the rest of the model."""
        return self.error_without(["fwd_bwd"])

    @property
    def error_of_rest(self) -> float:
        """The error apart from every term that moved (``moved_terms``): the rest of the model."""
        return self.error_without(self.moved_terms())

    def error_terms(self) -> str:
        """The error in words, term by term, largest share first (shares under 0.1 % left out)."""
        shares = sorted((r for r in self.split() if r["error"] is not None),
                        key=lambda r: -abs(r["error"]))
        return ", ".join(f"{r['phase']} {r['error'] * 100:+.1f} %" for r in shares
                         if abs(r["error"]) >= 0.001) or "every term within 0.1 %"

    def _moved_words(self, phase: str) -> str:
        what = NEEDED[phase] + ("" if phase == "fwd_bwd" else " per offloaded layer")
        moved = self.moved(phase)
        return f"the same {what} took {abs(moved) * 100:.1f} % " \
               f"{'longer' if moved > 0 else 'less time'}"

    def host_notice(self) -> str | None:
        """One plain sentence when the host changed between the passes, else None.

        What ``show``, the note and (``short_notice``) the TUI say.
        """
        moved = self.moved_terms()
        if not moved:
            return None
        first, *more = moved
        words = (f"the host changed between the passes: {self._moved_words(first)} in the asked "
                 f"config than in the baseline (more than the passes' own spread allows, "
                 f"{self.spread(first) * 100:.1f} %)")
        for phase in more:
            words += f", and {self._moved_words(phase)} (spread {self.spread(phase) * 100:.1f} %)"
        words += f"; the rest of the model is off by {self.error_of_rest * 100:+.1f} %"
        if self.placement_may_explain():
            words += (f"; on the cpu backend resident layers alone can make the compute up to "
                      f"{CPU_PLACEMENT * 100:.1f} % faster (less host traffic between the "
                      f"steps), so this may be the placement rather than the host")
        return words

    def placement_may_explain(self) -> bool:
        """The compute moved down, within ``CPU_PLACEMENT``, on cpu cards with resident layers.

        The step model takes a placement's compute to be the baseline's; on the
        cpu backend it is not quite (docs/design.md, "Compute and placement on
        the cpu backend"), and one run cannot tell that from the host.
        """
        moved = self.compute_moved
        return (self.cards_on_host and self.prediction.target.resident > 0
                and "fwd_bwd" in self.moved_terms() and -CPU_PLACEMENT <= moved < 0)

    def short_notice(self) -> str | None:
        """``host_notice`` in one panel line (the TUI)."""
        moved = self.moved_terms()
        if not moved:
            return None
        terms = ", ".join(f"{'compute' if p == 'fwd_bwd' else p} {self.moved(p) * 100:+.1f} % "
                          f"(spread {self.spread(p) * 100:.1f} %)" for p in moved)
        return f"host changed: {terms}, rest of the model {self.error_of_rest * 100:+.1f} %"

    @cached_property
    def _busy(self) -> tuple[str, float] | None:
        """Why a busy host explains the error, with the spread that allows it, else None.

        Only where the error is past the quiet-host figure (``QUIET_ERROR``) and
        no term moved beyond chance (the host notice says more then). Then:

        - ``"passes"``: the passes' own spread is at least the error, so chance
          alone allows it. The spread is the larger of the compute's and the
          whole step's (``step_spread``): a hog that slows the optimizers and
          the copies as much as the compute leaves the compute's spread below
          an error that the step's allows.
        - ``"compute"``: the error is the compute's share plus the rest of the
          model's (``error_without_compute``); the compute moved no further
          than its own spread and the rest is within the quiet-host figure, so
          what takes the error past it is the same device work timed twice on
          a busy host, even where the rest's few percent, on the same side,
          take the sum past every spread (a tiny-llama 2 x 2 run under the
          hog: compute +3.2 % inside 3.8 %, the rest -1.3 %, the error -4.0 %).

        An error past both stays the model's.
        """
        if abs(self.error) <= QUIET_ERROR or self.moved_terms():
            return None
        spread = max((s for s in (self.compute_spread, self.step_spread) if math.isfinite(s)),
                     default=math.nan)
        if math.isfinite(spread) and spread >= abs(self.error):
            return "passes", spread
        spread = self.compute_spread
        if math.isfinite(spread) and abs(self.compute_moved) <= spread \
                and abs(self.error_without_compute) <= QUIET_ERROR:
            return "compute", spread
        return None

    def busy_notice(self) -> str | None:
        """One plain sentence when the error is inside a busy host's noise (``_busy``), else None.

        What ``show`` and the note say beside the error, so that a large error
        on a loaded host is not read as the model's.
        """
        if self._busy is None:
            return None
        why, spread = self._busy
        if why == "passes":
            words = (f"the same work varied so much from step to step that the two passes may "
                     f"differ by up to {spread * 100:.1f} % by chance, more than this error")
        else:
            words = (f"{self._moved_words('fwd_bwd')} in the asked config than in the baseline, "
                     f"inside the {spread * 100:.1f} % that its step-to-step variation allows "
                     f"by chance, and apart from the compute the model is off by "
                     f"{self.error_without_compute * 100:+.1f} %")
        return (f"the host was busy: {words}, so this run cannot check the model closer than "
                f"that (on a quiet host it is within {QUIET_ERROR * 100:.0f} %)")

    def short_busy_notice(self) -> str | None:
        """``busy_notice`` in one panel line (the TUI)."""
        if self._busy is None:
            return None
        why, spread = self._busy
        if why == "passes":
            return f"busy host: the error is inside the passes' {spread * 100:.1f} % spread"
        return (f"busy host: compute {self.compute_moved * 100:+.1f} % inside its "
                f"{spread * 100:.1f} % spread, rest of the model "
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
            "compute_spread": self.compute_spread, "step_spread": self.step_spread,
            "host_changed": self.host_changed,
            "error_without_compute": self.error_without_compute,
            "moved_terms": self.moved_terms(), "error_of_rest": self.error_of_rest,
            "host_notice": self.host_notice(), "busy_notice": self.busy_notice(),
            "placement_may_explain": self.placement_may_explain(),
            "prediction": self.prediction.as_dict(),
        }


def relative_error(model_s: float | None, measured_s: float | None) -> float | None:
    """(model - measured) / measured, as in the reference record; None when either is missing."""
    if model_s is None or not measured_s:
        return None
    return (model_s - measured_s) / measured_s


def compare(prediction: Prediction, measured_steps: Steps, *,
            last: int | None = None, interleave: int = 0,
            paired: dict | None = None, paired_spreads: dict | None = None,
            cards_on_host: bool = False) -> Comparison:
    """The prediction against the median of the measured steps 6-N (6-``last`` if given).

    ``interleave`` says the passes alternated in blocks of that many steps;
    ``paired_window`` gives both for a run. ``last`` needs step dicts: for a
    stored pass, window it with ``stats.pass_stats(store, run, label, last=)``.
    ``paired`` (``paired_medians``) replaces the measured medians it has, and
    ``paired_spreads`` the spreads of the phases it has (``pairing.paired``).
    ``cards_on_host``: the run's cards are the host's CPU (the cpu backend).
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
        measured_pass=measured, paired_spreads=dict(paired_spreads or {}),
        cards_on_host=cards_on_host,
    )



def format_seconds(s: float) -> str:
    if s is None or not math.isfinite(s):
        return "–"
    return f"{s:.2f} s" if s >= 1 else f"{s * 1000:.1f} ms"


def format_error(e: float | None) -> str:
    if e is None or not math.isfinite(e):
        return "–"
    return f"{e * 100:+.1f} %"
