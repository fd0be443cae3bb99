"""What a run's note says, computed from the store (the store is only read here).

``collect(store, ref)`` gives one ``RunReport``; ``build(store, refs)`` one per
run. Every number comes through ``daemon.stepmodel.stats`` and ``daemon.stepmodel``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from daemon import stepmodel
from daemon.errors import BadInput, ModelFitError
from daemon.home import K8sConfig
from daemon.run.output import HeldOut, RunOutput, held_out, run_output
from daemon.run.spec import merged_config
from daemon.stepmodel import stats
from daemon.store import FINISHED, Store
from rngdctl.export.words import _get, _md, describe_placement, secs
from trainer import records


@dataclass(frozen=True)
class ModelRow:
    """One line of the "run | step | tok/s | model | error" table."""

    label: str
    measured_s: float | None
    tokens_per_s: float | None
    model_s: float | None = None
    error: float | None = None
    #: Which figure ``measured_s`` is (``Comparison.measured_words`` for the compared row).
    figure: str = "median of steps 6-N"


@dataclass(frozen=True)
class GateSummary:
    """The pre-submit checks of one run: how many, what blocked, the load they read."""

    checks: int
    blocked: int
    blocked_by: dict[str, int]
    thresholds: dict[str, str]
    not_applicable: dict[str, str]
    load_range: tuple[float, float] | None


def summarize_gates(checks: list[dict]) -> GateSummary:
    blocked_by: dict[str, int] = {}
    thresholds: dict[str, str] = {}
    not_applicable: dict[str, str] = {}
    for check in checks:
        for gate in check["gates"]:
            thresholds[gate["name"]] = str(gate.get("threshold"))
            if gate.get("verdict") == "fail":
                blocked_by[gate["name"]] = blocked_by.get(gate["name"], 0) + _checks_in(check)
            if gate.get("verdict") == "n/a":
                not_applicable[gate["name"]] = gate.get("detail") or "not applicable"
    return GateSummary(
        checks=sum(_checks_in(c) for c in checks),
        blocked=sum(_checks_in(c) for c in checks if not c["passed"]),
        blocked_by=blocked_by,
        thresholds=thresholds,
        not_applicable=not_applicable,
        load_range=stats.gate_load_range(checks),
    )


def _checks_in(check: dict) -> int:
    """Checks a row stands for: one, or a run of identical verdicts folded by compaction."""
    return check.get("count") or 1


@dataclass
class RunReport:
    """Everything the note says about one run, computed from the store.

    The steps themselves stay in the store: ``main`` and ``baseline`` are the
    passes' aggregates (``stats.pass_stats``), and the step log is streamed
    from ``store`` when the data folder is written.
    """

    run: dict
    label: str
    slug: str
    config: dict
    main: stats.PassStats
    baseline: stats.PassStats
    passes: list[dict]
    steps_total: int | None
    summary: stats.RunSummary
    drift: stats.Drift
    loss_rows: list[stats.LossRow]
    host_load: tuple[float, float] | None
    gates: GateSummary
    gate_checks: list[dict]
    events: list[dict]
    store: Store | None = field(default=None, repr=False, compare=False)
    model_rows: list[ModelRow] = field(default_factory=list)
    model_notes: list[str] = field(default_factory=list)
    comparison: stepmodel.Comparison | None = None
    k8s: K8sConfig | None = None
    #: The run's model folder, checkpoints and resumes, and its held-out loss
    #: (daemon/run/output.py): what the note says the run delivered.
    output: RunOutput | None = None
    held_out: HeldOut = field(default_factory=HeldOut)
    #: Each card the run held: its readings' ranges and throttling (Store.card_ranges).
    cards: list[dict] = field(default_factory=list)

    @property
    def id(self) -> int:
        return self.run["id"]

    @cached_property
    def attempt_starts(self) -> list[float]:
        """When each attempt began (``attempt_starts``): each event is timed from its own."""
        return attempt_starts(self.events)

    @property
    def steps_done(self) -> int:
        return self.main.steps

    @property
    def last_step(self) -> int:
        return self.main.step_span[1] if self.main.step_span else 0

    def as_dict(self) -> dict:
        """The note's numbers for this run, for ``--json`` and other readers."""
        return {
            "id": self.id,
            "name": self.run.get("name"),
            "status": self.run["status"],
            "attempts": self.run.get("attempts"),
            "steps_done": self.steps_done,
            "steps_total": self.steps_total,
            "median_step_s": self.summary.median_step_s,
            "tokens_per_s": self.summary.tokens_per_s,
            "median_step_s_6_25": self.drift.early_median_s,
            "slowest_step": self.drift.slowest_step,
            "slowest_step_s": self.drift.slowest_s,
            "step1_loss": self.summary.first_loss,
            "nonfinite_losses": self.summary.nonfinite_losses,
            "host_load_range": self.host_load,
            "cards": self.cards,
            "gate_checks": self.gates.checks,
            "gate_load_range": self.gates.load_range,
            "loss_table": [
                {"first": r.first, "last": r.last, "steps": r.steps,
                 "mean_loss": r.mean_loss, "median_step_s": r.median_step_s}
                for r in self.loss_rows
            ],
            "step_model": [
                {"run": m.label, "step_s": m.measured_s, "figure": m.figure,
                 "tokens_per_s": m.tokens_per_s, "model_s": m.model_s, "error": m.error}
                for m in self.model_rows
            ],
            **(self.output.as_dict() if self.output else {}),  # "output", "resumes"
            "held_out": self.held_out.as_dict(),
        }


def attempt_starts(events: list[dict]) -> list[float]:
    """When each attempt of a run began, oldest first: its ``notify`` start (stored at each
    launch, from the tick that claimed the run, a notifier set or not), else its ``launch``
    (a process or a Job; a train Job after its own compile Job is the same attempt)."""
    starts, announced, compiled = [], False, False
    for e in events:
        data = e.get("data") or {}
        if e["kind"] == "notify" and data.get("on") == "start":
            starts.append(e["time"])
            announced, compiled = True, False
        elif e["kind"] == "launch":
            stage = data.get("stage")
            if not announced and not (compiled and stage == "train"):
                starts.append(e["time"])
            announced, compiled = False, stage == "compile"
    return starts


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return slug[:40].strip("-")


def _run_slug(run: dict) -> str:
    return (slugify(run["name"]) if run.get("name") else "") or f"run-{run['id']}"


def _run_label(run: dict) -> str:
    return run["name"] or f"run {run['id']}"


def collect(store: Store, ref: int | str, *, k8s: K8sConfig | None = None) -> RunReport:
    """The numbers for one run (by id or name). Raises NoSuchRun.

    ``k8s`` (the home's ``[k8s]`` config) names the Job deadline and TTL that a
    k8s run without its own ``--deadline`` got.
    """
    run = store.run(ref)
    run_id = run["id"]
    passes = store.passes(run_id)
    config = merged_config(run, passes)
    main = stats.pass_stats(store, run_id, records.MAIN)
    baseline = stats.pass_stats(store, run_id, records.BASELINE)
    steps_total = _get(config, "steps")
    steps_total = steps_total if isinstance(steps_total, int) else None
    checks = store.gate_checks(run_id=run_id)
    report = RunReport(
        run=run,
        label=_run_label(run),
        slug=_run_slug(run),
        config=config,
        main=main,
        baseline=baseline,
        passes=passes,
        steps_total=steps_total,
        summary=main.summary(steps_total),
        drift=main.drift(),
        loss_rows=loss_rows(store, run_id, main),
        host_load=store.sample_load_range(run_id),
        gates=summarize_gates(checks),
        gate_checks=checks,
        events=store.events(run_id=run_id),
        store=store,
        k8s=k8s,
        output=run_output(store, run),
        held_out=held_out(store, run_id),
        cards=store.card_ranges(run_id),
    )
    if baseline.steps:
        report.model_rows, report.model_notes = model_rows(store, report)
    return report


def loss_rows(store: Store, run_id: int, main: stats.PassStats) -> list[stats.LossRow]:
    """The loss table by step range, fitted to the steps the run reached."""
    if not main.step_span:
        return []
    return stats.loss_table_of(store, run_id, records.MAIN, main.step_span[1])

# === The step model ===========================================================


def model_rows(store: Store, report: RunReport) -> tuple[list[ModelRow], list[str]]:
    """The baseline and the asked config, measured, with the step model's prediction.

    Returns the table's rows and lines for the note: where each term came
    from, or why the model gave no number.
    """
    baseline_row = ModelRow(
        f"baseline ({describe_placement({**report.config, 'resident': 0})})",
        report.baseline.median_step_s, report.baseline.tokens_per_s,
        figure=stepmodel.median_words(report.baseline))
    label = describe_placement(report.config)
    if not report.main.steps:
        return [baseline_row], [("The run has no steps of the asked config to compare with "
                                "the model.")]
    measured_row = ModelRow(label, report.main.median_step_s, report.main.tokens_per_s,
                            figure=stepmodel.median_words(report.main))
    try:
        # stepmodel.for_run(store, id) with the passes' aggregates read above;
        # a test checks that the two agree.
        comparison = stepmodel.for_run(store, report.id, main=report.main,
                                       baseline=report.baseline)
    except ModelFitError as exc:
        return [baseline_row, measured_row], [f"The step model gave no prediction: {exc}."]
    report.comparison = comparison
    rows = [baseline_row, ModelRow(label, comparison.measured_s,
                                   comparison.measured_tokens_per_s, comparison.model_s,
                                   comparison.error, figure=comparison.measured_words)]
    terms = comparison.prediction.terms
    notes = [(f"The model's terms come from the baseline pass in the same run; measured is "
             f"the {comparison.measured_words} (the steps' interquartile range "
             f"{secs(comparison.iqr[0])}–{secs(comparison.iqr[1])}). "
             f"The phase furthest from its prediction is {comparison.worst_phase}."), "",
             "| term | seconds | per | from |", "| --- | --- | --- | --- |"]
    notes += [f"| {t.name} | {secs(t.seconds)} | {_md(t.per)} | {_md(t.source)} |"
              for t in terms.all()]
    return rows, notes + error_split_notes(comparison)


def error_split_notes(comparison: stepmodel.Comparison) -> list[str]:
    """The verdict with its interval, the error split into its terms, and the host-changed
    notice when the host changed."""
    intro = (f"The error, {comparison.verdict()}, phase by phase (the interval is 1.96 "
             "standard errors of the two passes' ratio, from the run's own step-to-step "
             "spread; each phase's share of error is its model less measured over the "
             f"measured step, the {comparison.measured_name}):")
    lines = ["", intro, "", "| phase | model | measured | share of error |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {r['phase']} | {secs(r['model_s'])} | {secs(r['measured_s'])} | "
              f"{stepmodel.format_error(r['share'])} |" for r in comparison.split()]
    notice = comparison.host_notice()
    if notice:
        lines += ["", f"**{notice[0].upper()}{notice[1:]}.**"]
    return lines


def refuse_without_steps(store: Store, run: dict) -> None:
    """BadInput, one line, for a run with no step stored: a note of it would have no step
    time, loss or model to give, and one of a queued run would say it "ended queued"."""
    if store.step_counts(run["id"]):
        return
    status = run["status"]
    if status in FINISHED:
        raise BadInput(f"run {run['id']} ended {status} with no step stored: nothing to write "
                       f"up (`rngdctl show {run['id']}` gives its reason and events)")
    raise BadInput(f"run {run['id']} is {status} and has no step yet: export it once it has "
                   "run")


def build(store: Store, run_ids: list[int | str], *,
          k8s: K8sConfig | None = None) -> list[RunReport]:
    """One report per run, in the order given (a run named twice counts once)."""
    if not run_ids:
        raise BadInput("export needs at least one run")
    reports: list[RunReport] = []
    for ref in run_ids:
        refuse_without_steps(store, store.run(ref))
        report = collect(store, ref, k8s=k8s)
        if all(r.id != report.id for r in reports):
            reports.append(report)
    # Two runs with the same name still get their own step log file.
    seen: dict[str, int] = {}
    for r in reports:
        seen[r.slug] = seen.get(r.slug, 0) + 1
        if seen[r.slug] > 1:
            r.slug = f"{r.slug}-{r.id}"
    return reports
