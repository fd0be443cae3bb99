"""The model for stored runs: a run against its own baseline, and configs that have not run."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from daemon.errors import ModelFitError
from daemon.stepmodel import stats
from daemon.stepmodel.compare import Comparison, compare
from daemon.stepmodel.fit import Prediction, Terms, edge_params, fit, predict
from daemon.stepmodel.memory import (
    MemoryCheck,
    card_gb_for,
    host_memory_check,
    host_plays_cards,
    memory_check,
)
from daemon.stepmodel.pairing import paired, paired_window
from daemon.stepmodel.shape import Shape, _extra
from trainer.records import BASELINE, MAIN, OPTIM_CALIBRATION


def _pass_config(store, run_id: int, label: str) -> dict | None:
    for p in store.passes(run_id):
        if p["config_label"] == label:
            return p["config"]
    return None


@dataclass(frozen=True)
class Baseline:
    """An all-offload pass in the store: its numbers and start config."""

    run_id: int
    label: str  # the pass's config_label
    stats: stats.PassStats  # stats.pass_stats: medians over steps 6-N, its newest step
    config: dict


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


def _stored_pass(store, run_id: int, label: str) -> stats.PassStats | None:
    """The pass's numbers (``stats.pass_stats``); None when it has no steps."""
    p = stats.pass_stats(store, run_id, label) if store.pass_counts(run_id, label)[0] else None
    return p if p is not None and p.steps else None


def terms_for_run(store, run_id: int, *, baseline: stats.PassStats | None = None,
                  calibrated: bool = True) -> Terms | None:
    """Terms fitted from the run's own baseline pass (``baseline``: its ``stats.pass_stats``
    where the caller has it); None without one. ``calibrated=False`` leaves the optimizer
    calibration out (bench/stepmodel_optim_ab.py)."""
    baseline = baseline or _stored_pass(store, run_id, BASELINE)
    if baseline is None or not baseline.steps:
        return None
    config = _pass_config(store, run_id, BASELINE)
    if not calibrated and config:
        config = {k: v for k, v in config.items() if k != OPTIM_CALIBRATION}
    return fit(baseline, config, baseline_label=f"run {run_id} baseline")


def for_run(store, run_id: int, *, main: stats.PassStats | None = None,
            baseline: stats.PassStats | None = None, calibrated: bool = True) -> Comparison | None:
    """The run's main pass against the model from its own baseline pass; None without both
    (ModelFitError when the baseline cannot give the terms). Interleaved, the main steps
    beside the baseline's, paired block by block (``pairing.paired``)."""
    main = main or _stored_pass(store, run_id, MAIN)
    if main is None or not main.steps:
        return None
    baseline = baseline or _stored_pass(store, run_id, BASELINE)
    terms = baseline and terms_for_run(store, run_id, baseline=baseline, calibrated=calibrated)
    if terms is None:
        return None
    prediction = predict(terms, Shape.of_step(main.last))
    window = paired_window(_pass_config(store, run_id, MAIN), baseline)
    measured, pairs, block = main, None, 0
    if window:  # interleaved: the main steps that ran beside the baseline's, read as steps
        last, block = window
        beside = store.steps_until(run_id, MAIN, last)
        if store.pass_counts(run_id, MAIN)[1]:  # steps 6-N exist: the window is 6-last
            beside = [s for s in beside if s["step"] > stats.WARMUP_STEPS]
        measured = stats.PassStats.of_steps(beside)
        pairs = paired(store.steps_until(run_id, BASELINE, last), beside, block, prediction)
    return compare(prediction, measured, interleave=block, paired=pairs)


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


@dataclass(frozen=True)
class Fitted:
    """A stored all-offload pass with its terms fitted: prices any config without the store,
    so a caller that prices many (the queue's estimates) reads and fits the baseline once."""

    baseline: Baseline
    terms: Terms

    def price(self, *, cards: int, resident: int, seq_len: int | None = None,
              accum: int | None = None, card_gb: float | None = None,
              host_gb: float | None = None, check_host: bool = False) -> Answer:
        """``model_config``'s answer for one config (its keywords)."""
        b, config = self.terms.baseline, self.baseline.config
        target = Shape(layers=b.layers, cards=cards, resident_per_card=resident,
                       accum=accum or b.accum, seq_len=seq_len or b.seq_len,
                       micro_batch=b.micro_batch)
        backend = str(config.get("backend") or "cpu")
        kw = {"params_per_layer": _extra(self.baseline.stats.last).get("params_per_layer")
              or config.get("params_per_layer"), "edge": edge_params(config) or 0,
              "tied_head": bool(config.get("tied_head"))}
        memory = memory_check(target, **kw,
                              card_gb=card_gb if card_gb is not None else card_gb_for(backend))
        host = host_memory_check(target, **kw, host_gb=host_gb,
                                 host_plays_card=host_plays_cards(backend)) if check_host else None
        return Answer(self.baseline, predict(self.terms, target), memory, host)


def fitted(store, baseline_run: int, *, resident_run: int | None = None) -> Fitted:
    """A stored run's all-offload pass and the terms fitted from it; ``resident_run``'s main
    pass gives the device optimizer per layer."""
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
                baseline_label=f"run {baseline_run} {base.label}",
                resident_label=f"run {resident_run} main")
    return Fitted(base, terms)


def model_config(store, baseline_run: int, *, cards: int, resident: int,
                 seq_len: int | None = None, accum: int | None = None,
                 card_gb: float | None = None, resident_run: int | None = None,
                 host_gb: float | None = None, check_host: bool = False) -> Answer:
    """Predict a config that has not run, from a stored run's all-offload pass. ``card_gb``
    overrides the backend's card memory; ``resident_run``'s main pass gives the device
    optimizer per layer; ``check_host`` checks the host's memory too (``host_gb``)."""
    return fitted(store, baseline_run, resident_run=resident_run).price(
        cards=cards, resident=resident, seq_len=seq_len, accum=accum, card_gb=card_gb,
        host_gb=host_gb, check_host=check_host)


def hardware_of(store, run_id: int) -> str:
    """What the run ran on, for the step-model table: backend kind and host."""
    config = _pass_config(store, run_id, MAIN) or {}
    kinds = [b.split(":")[0].strip() for b in str(config.get("backend") or "cpu").split(",")]
    host = store.run(run_id).get("host")
    kind = kinds[0] if len(set(kinds)) == 1 else "+".join(kinds)
    return f"{kind} ({host})" if host else kind
