"""The experiment note: one markdown file and its data folder, from the store.

``write_note(store, run_ids, out_dir)`` writes ``<out_dir>/<date>-<slug>.md``
and ``<out_dir>/data/<slug>/`` in the form of the reference record
(``shared/reference/resident-200-steps-pr.txt``): code version, hardware,
recipe, how the run was launched, the pre-submit checks and their load range,
then per run its steps, step time, drift, loss table, step-1 loss, step-model
table and events. Several runs give one note with a comparison table.

Every number in the note is computed here from the store (through
``daemon.stats``); nothing is typed. The module reads the store only.
"""

from __future__ import annotations

import csv
import json
import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from daemon import stats, stepmodel
from daemon.errors import BadInput, ModelFitError
from daemon.home import K8sConfig
from daemon.store import CANCELLED, DONE, FAILED, OOM, TIMEOUT, Store
from rngdctl.units import DASH as _DASH
from rngdctl.units import finite as _finite
from rngdctl.units import rate, secs
from trainer import records

#: The 6-N median may differ from the 6-25 median by this fraction before the
#: note says that step time drifted.
DRIFT_TOLERANCE = 0.05

#: The loss table has at most this many rows: past it, the 50-step ranges after
#: step 100 widen to 100, 200, 500, 1000... steps (a 100,000-step run: 20,000).

#: At most this many event lines per run in the note (repeats are folded
#: first); the data folder's events.csv has them all.
MAX_EVENT_LINES = 25

_END_STATUS = {DONE: "ok", OOM: "oom", CANCELLED: "cancelled", FAILED: "error",
               TIMEOUT: "error"}

_GATE_WORDS = {
    "host_load": "host load",
    "device_idle": "no process holding /dev/rngd",
    "cards_free": "cards free",
    "image_present": "image present",
    "one_at_a_time": "no other run active",
}

#: Event kinds that every good run has; "What went wrong" lists all others
#: (image pulls, compiles, retries, requeues, warnings, non-finite losses...).
ROUTINE_EVENTS = frozenset({"launch", "placement"})



# === Numbers as the note prints them =========================================


def loss(x: float | None, digits: int = 4) -> str:
    if x is None:
        return _DASH
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}"


def load(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 10 else f"{x:.1f}"


def load_span(span: tuple[float, float] | None) -> str | None:
    if span is None:
        return None
    low, high = load(span[0]), load(span[1])
    return low if low == high else f"{low}–{high}"


def percent(x: float | None) -> str:
    return f"{x * 100:+.1f} %" if _finite(x) else _DASH


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}–{last}"


def _ago(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"+{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"+{minutes}m{s:02d}s"
    hours, m = divmod(minutes, 60)
    return f"+{hours}h{m:02d}m"


def _md(text: str) -> str:
    """A value safe inside a markdown table cell or list item."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


# === What a run's note says, computed ========================================


def _get(config: dict, *names, default=None):
    for name in names:
        if config.get(name) is not None:
            return config[name]
    return default


def describe_placement(config: dict) -> str:
    """"2 cards × 8 resident layers per card", "1 card, all offload"."""
    cards = _get(config, "cards", default=1)
    resident = _get(config, "resident", "resident_layers")
    card_words = f"{cards} card{'s' if cards != 1 else ''}"
    if resident is None:
        return card_words
    if resident == 0:
        return f"{card_words}, all offload"
    per = " per card" if cards != 1 else ""
    return f"{card_words} × {resident} resident layer{'s' if resident != 1 else ''}{per}"


def describe_recipe(config: dict) -> str:
    """"tiny-llama, S=64, accum 2, lr 0.001, synthetic, seed 0" (the backend is hardware)."""
    parts = []
    model = _get(config, "model")
    if model is not None:
        parts.append(str(model))
    seq = _get(config, "seq_len", "seq-len", "seq")
    if seq is not None:
        parts.append(f"S={seq}")
    accum = _get(config, "accum", "accumulation", "grad_accum")
    if accum is not None:
        parts.append(f"accum {accum}")
    lr = _get(config, "lr")
    if lr is not None:
        parts.append(f"lr {lr:g}" if isinstance(lr, (int, float)) else f"lr {lr}")
    data = _get(config, "data")
    if data is not None:
        # "nsmc:/home/kim/nsmc/ratings_test.txt" reads as "nsmc:ratings_test.txt".
        kind, sep, path = str(data).partition(":")
        parts.append(f"{kind}:{Path(path).name}" if sep and "/" in path else str(data))
    seed = _get(config, "seed")
    if seed is not None:
        parts.append(f"seed {seed}")
    return ", ".join(parts) or "not recorded"


@dataclass(frozen=True)
class ModelRow:
    """One line of the "run | step | tok/s | model | error" table."""

    label: str
    measured_s: float | None
    tokens_per_s: float | None
    model_s: float | None = None
    error: float | None = None


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
    """Everything the note says about one run, computed from the store."""

    run: dict
    label: str
    slug: str
    config: dict
    steps: list[dict]
    baseline: list[dict]
    passes: list[dict]
    steps_total: int | None
    summary: stats.RunSummary
    drift: stats.Drift
    loss_rows: list[stats.LossRow]
    host_load: tuple[float, float] | None
    gates: GateSummary
    gate_checks: list[dict]
    samples: list[dict]
    events: list[dict]
    model_rows: list[ModelRow] = field(default_factory=list)
    model_notes: list[str] = field(default_factory=list)
    comparison: stepmodel.Comparison | None = None
    k8s: K8sConfig | None = None

    @property
    def id(self) -> int:
        return self.run["id"]

    @property
    def last_step(self) -> int:
        return self.steps[-1]["step"] if self.steps else 0

    @property
    def nonfinite(self) -> list[dict]:
        return [s for s in self.steps if s["loss"] is None or not math.isfinite(s["loss"])]

    def as_dict(self) -> dict:
        """The note's numbers for this run, for ``--json`` and other readers."""
        return {
            "id": self.id,
            "name": self.run.get("name"),
            "status": self.run["status"],
            "attempts": self.run.get("attempts"),
            "steps_done": len(self.steps),
            "steps_total": self.steps_total,
            "median_step_s": self.summary.median_step_s,
            "tokens_per_s": self.summary.tokens_per_s,
            "median_step_s_6_25": self.drift.early_median_s,
            "slowest_step": self.drift.slowest_step,
            "slowest_step_s": self.drift.slowest_s,
            "step1_loss": self.summary.first_loss,
            "nonfinite_losses": self.summary.nonfinite_losses,
            "host_load_range": self.host_load,
            "gate_checks": self.gates.checks,
            "gate_load_range": self.gates.load_range,
            "loss_table": [
                {"first": r.first, "last": r.last, "steps": r.steps,
                 "mean_loss": r.mean_loss, "median_step_s": r.median_step_s}
                for r in self.loss_rows
            ],
            "step_model": [
                {"run": m.label, "step_s": m.measured_s, "tokens_per_s": m.tokens_per_s,
                 "model_s": m.model_s, "error": m.error}
                for m in self.model_rows
            ],
        }


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return slug[:40].strip("-")


def _run_slug(run: dict) -> str:
    return (slugify(run["name"]) if run.get("name") else "") or f"run-{run['id']}"


def _run_label(run: dict) -> str:
    return run["name"] or f"run {run['id']}"


def _merged_config(run: dict, passes: list[dict]) -> dict:
    # The submitted config, overlaid with what the trainer said it ran.
    config = dict(run.get("config") or {})
    for p in passes:
        if p["config_label"] == records.MAIN:
            config.update(p.get("config") or {})
    return config


def collect(store: Store, ref: int | str, *, k8s: K8sConfig | None = None) -> RunReport:
    """The numbers for one run (by id or name). Raises NoSuchRun.

    ``k8s`` (the home's ``[k8s]`` config) names the Job deadline and TTL that a
    k8s run without its own ``--deadline`` got.
    """
    run = store.run(ref)
    run_id = run["id"]
    passes = store.passes(run_id)
    config = _merged_config(run, passes)
    steps = store.steps(run_id, records.MAIN)
    baseline = store.steps(run_id, records.BASELINE)
    steps_total = _get(config, "steps")
    steps_total = steps_total if isinstance(steps_total, int) else None
    checks = store.gate_checks(run_id=run_id)
    samples = store.samples(run_id=run_id)
    report = RunReport(
        run=run,
        label=_run_label(run),
        slug=_run_slug(run),
        config=config,
        steps=steps,
        baseline=baseline,
        passes=passes,
        steps_total=steps_total,
        summary=stats.summarize(steps, steps_total),
        drift=stats.drift(steps),
        loss_rows=loss_rows(steps),
        host_load=stats.load_range(samples),
        gates=summarize_gates(checks),
        gate_checks=checks,
        samples=samples,
        events=store.events(run_id=run_id),
        k8s=k8s,
    )
    if baseline:
        report.model_rows, report.model_notes = model_rows(store, report)
    return report


def loss_rows(steps: list[dict]) -> list[stats.LossRow]:
    """The loss table by step range, fitted to the steps the run reached."""
    return stats.loss_table(steps, steps[-1]["step"]) if steps else []


# === The step model ===========================================================


def model_rows(store: Store, report: RunReport) -> tuple[list[ModelRow], list[str]]:
    """The baseline and the asked config, measured, with the step model's prediction.

    Returns the table's rows and lines for the note: where each term came
    from, or why the model gave no number.
    """
    baseline_row = ModelRow(
        f"baseline ({describe_placement({**report.config, 'resident': 0})})",
        stats.median_step_s(report.baseline), stats.tokens_per_s(report.baseline))
    label = describe_placement(report.config)
    measured_row = ModelRow(label, stats.median_step_s(report.steps),
                            stats.tokens_per_s(report.steps))
    if not report.steps:
        return [baseline_row], [("The run has no steps of the asked config to compare with "
                                "the model.")]
    try:
        # stepmodel.for_run(store, id), without reading the main pass's steps
        # again (100,000 of them take seconds to decode); a test checks that
        # the two agree.
        terms = stepmodel.terms_for_run(store, report.id)
        target = stepmodel.Shape.of_steps(report.steps)
        comparison = stepmodel.compare(stepmodel.predict(terms, target), report.steps,
                                       **stepmodel.paired_window(report.config, report.baseline))
    except ModelFitError as exc:
        return [baseline_row, measured_row], [f"The step model gave no prediction: {exc}."]
    report.comparison = comparison
    rows = [baseline_row, ModelRow(label, comparison.measured_s,
                                   comparison.measured_tokens_per_s, comparison.model_s,
                                   comparison.error)]
    terms = comparison.prediction.terms
    notes = [(f"The model's terms come from the baseline pass in the same run; measured is "
             f"the median of {comparison.window} "
             f"(interquartile range {secs(comparison.iqr[0])}–{secs(comparison.iqr[1])}). "
             f"The phase furthest from its prediction is {comparison.worst_phase}."), "",
             "| term | seconds | per | from |", "| --- | --- | --- | --- |"]
    notes += [f"| {t.name} | {secs(t.seconds)} | {_md(t.per)} | {_md(t.source)} |"
              for t in terms.all()]
    return rows, notes + error_split_notes(comparison)


def error_split_notes(comparison: stepmodel.Comparison) -> list[str]:
    """The error split into its terms, and the host-changed notice when it applies."""
    intro = (f"The error, {stepmodel.format_error(comparison.error)}, phase by phase (each "
             "phase's share of the error is its model less measured over the measured step):")
    lines = ["", intro, "", "| phase | model | measured | share of the error |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {r['phase']} | {secs(r['model_s'])} | {secs(r['measured_s'])} | "
              f"{stepmodel.format_error(r['error'])} |" for r in comparison.split()]
    notice = comparison.host_notice()
    if notice:
        lines += ["", f"**{notice[0].upper()}{notice[1:]}.**"]
    return lines


# === Rendering ===============================================================


def _one_or_each(reports: list[RunReport], value) -> str:
    """One value when every run agrees, else each run's."""
    values = [value(r) for r in reports]
    if len(set(values)) == 1:
        return values[0]
    return "; ".join(f"{r.label}: {v}" for r, v in zip(reports, values))


def _code(report: RunReport) -> str:
    git = report.run.get("git")
    versions = report.run.get("versions") or {}
    parts = [f"git {git[:12]}" if git else "git commit not recorded"]
    parts += [f"{name} {version}" for name, version in sorted(versions.items())]
    return ", ".join(parts)


def job_launched(report: RunReport) -> dict | None:
    """What the run's last card Job really had, from its ``launch`` (or ``adopt``) event.

    The k8s launcher stores the Job's name, namespace, node, image, cards,
    activeDeadlineSeconds and ttlSecondsAfterFinished there; runs launched
    before it did have no such data (None).
    """
    found = None
    for event in report.events:
        data = event.get("data") or {}
        if event["kind"] in ("launch", "adopt") and data.get("stage", "train") == "train" \
                and data.get("job"):
            found = data
    return found


def _hardware(report: RunReport) -> str:
    run = report.run
    parts = [f"backend {_get(report.config, 'backend', default=_DASH)}"]
    if run.get("node"):
        parts.append(f"node {run['node']}")
    if run.get("host"):
        parts.append(f"host {run['host']}")
    if run.get("launcher") == "k8s":
        job = job_launched(report) or {}
        image = job.get("image") or _get(report.config, "image") or (
            report.k8s.image if report.k8s else None)
        if image:
            parts.append(f"image {image}")
        parts.append(f"image digest {run['image_digest']}" if run.get("image_digest")
                     else "image digest not recorded")
    elif run.get("image_digest"):
        parts.append(f"image digest {run['image_digest']}")
    else:
        parts.append("no image digest (not a container run)")
    return ", ".join(parts)


def _launch(report: RunReport) -> str:
    launcher = report.run.get("launcher")
    deadline = _get(report.config, "deadline")
    if launcher == "k8s":
        how = "one run-and-exit Kubernetes Job at a time, "
        job = job_launched(report)
        if job is not None:
            # What the Job really had, stored when it was created.
            how += f"Job {job.get('namespace') or '?'}/{job['job']}"
            how += f" on node {job['node']}" if job.get("node") else ""
            deadline_s, ttl = job.get("activeDeadlineSeconds"), job.get("ttlSecondsAfterFinished")
            how += f", activeDeadlineSeconds {deadline_s if deadline_s is not None else 'unset'}"
            how += f", ttlSecondsAfterFinished {ttl if ttl is not None else 'unset'}"
            return how
        # Older runs: no Job data stored; say what the config gives.
        how += "activeDeadlineSeconds "
        if deadline:
            how += str(deadline)
        elif report.k8s is not None:
            how += f"{report.k8s.default_deadline} (config.toml's [k8s] default_deadline)"
        else:
            how += "from config.toml's [k8s] default_deadline"
        if report.k8s is not None:
            how += f", ttlSecondsAfterFinished {report.k8s.ttl_seconds}"
        return how
    if launcher == "local":
        how = "the local launcher, the trainer as a child process, one run at a time"
    elif launcher:
        how = f"the {launcher} launcher, one run at a time"
    else:
        how = "never launched"
    how += f", deadline {deadline} s" if deadline else ", no deadline"
    return how


def _attempts(n: int | None) -> str:
    if not n:
        return "never launched"
    if n == 1:
        return "on the first attempt"
    return f"after {n} attempts"


def _checks_line(reports: list[RunReport]) -> str:
    thresholds: dict[str, str] = {}
    not_applicable: dict[str, str] = {}
    for r in reports:
        thresholds.update(r.gates.thresholds)
        not_applicable.update(r.gates.not_applicable)
    total = sum(r.gates.checks for r in reports)
    if not total:
        return "no pre-submit check was stored for these runs."
    gates = []
    for name, threshold in thresholds.items():
        words = _GATE_WORDS.get(name, name.replace("_", " "))
        if name in not_applicable:
            gates.append(f"{words} (n/a: {not_applicable[name]})")
        else:
            gates.append(f"{words} ({threshold})")
    blocked = sum(r.gates.blocked for r in reports)
    blocked_by: dict[str, int] = {}
    for r in reports:
        for name, n in r.gates.blocked_by.items():
            blocked_by[name] = blocked_by.get(name, 0) + n
    line = f"before each launch: {', '.join(gates)}. {total} check{'s' if total != 1 else ''}"
    if blocked:
        by = ", ".join(f"{_GATE_WORDS.get(k, k)} {n}" for k, n in blocked_by.items())
        line += f", {blocked} blocked ({by})"
    spans = [r.gates.load_range for r in reports if r.gates.load_range]
    if spans:
        span = (min(s[0] for s in spans), max(s[1] for s in spans))
        line += f"; the checks logged load {load_span(span)}"
    return line + "."


def _outcome(report: RunReport) -> str:
    run = report.run
    done = len(report.steps)
    total = report.steps_total
    parts = [f"{done}/{total} steps" if total else f"{done} steps"]
    status = run["status"]
    parts.append("OOM" if status == OOM else "no OOM")
    if status not in (DONE, OOM):
        reason = f": {run['exit_reason']}" if run.get("exit_reason") else ""
        parts.append(f"status {status}{reason}")
    parts.append(_attempts(run.get("attempts")))
    line = ", ".join(parts) + "."
    span = load_span(report.host_load)
    if span:
        line += f" Host load was {span}."
    return line


def _timing(report: RunReport) -> list[str]:
    s, d = report.summary, report.drift
    last = report.last_step
    if last <= stats.WARMUP_STEPS:
        return [(f"Median step over all {len(report.steps)} steps (the run is shorter than "
                f"the {stats.WARMUP_STEPS} warm-up steps): {secs(s.median_step_s)}, "
                f"{rate(s.tokens_per_s)} tok/s.")]
    lines = [(f"Step {stats.WARMUP_STEPS + 1}–{last} median: {secs(s.median_step_s)}/step, "
             f"{rate(s.tokens_per_s)} tok/s.")]
    slowest = f"the slowest step (step {d.slowest_step}) took {secs(d.slowest_s)}"
    if last <= 25:
        lines[0] += (f" The run ends before step 26, so drift cannot be told; "
                     f"{slowest}.")
        return lines
    ratio = d.ratio
    if ratio is None:
        lines[0] += f" {slowest[0].upper()}{slowest[1:]}."
    elif abs(ratio - 1) <= DRIFT_TOLERANCE:
        same = "also " if secs(d.early_median_s) == secs(d.median_s) else ""
        lines[0] += (f" The steps 6–25 median was {same}{secs(d.early_median_s)}, and "
                     f"{slowest}, so step time did not drift.")
    else:
        lines[0] += (f" The steps 6–25 median was {secs(d.early_median_s)}, so step time "
                     f"drifted by {percent(ratio - 1)} over the run; {slowest}.")
    return lines


def _loss_table(report: RunReport) -> list[str]:
    rows = ["| steps | mean loss | median step |", "| --- | --- | --- |"]
    for r in report.loss_rows:
        chosen = [s for s in report.steps if r.first <= s["step"] <= r.last]
        bad = sum(1 for s in chosen if s["loss"] is None or not math.isfinite(s["loss"]))
        mean = loss(r.mean_loss, 3) if r.mean_loss is not None else (
            "NaN" if bad else _DASH)
        if bad and r.mean_loss is not None:
            mean += f" ({bad} non-finite left out)"
        rows.append(f"| {_span(r.first, r.last)} | {mean} | {secs(r.median_step_s)} |")
    return rows


def _loss_lines(report: RunReport) -> list[str]:
    first = report.steps[0]
    lines = [f"Step {first['step']} loss is {loss(first['loss'])}."]
    bad = report.nonfinite
    if bad:
        kinds = sorted({loss(s['loss']) for s in bad})
        lines.append(f"{len(bad)} step{'s' if len(bad) != 1 else ''} had a non-finite loss "
                     f"({', '.join(kinds)}), first at step {bad[0]['step']}; the loss table's "
                     f"means leave them out.")
    return lines


def _model_table(report: RunReport) -> list[str]:
    rows = ["| run | step | tok/s | model | error |", "| --- | --- | --- | --- | --- |"]
    for m in report.model_rows:
        rows.append(f"| {_md(m.label)} | {secs(m.measured_s)} | {rate(m.tokens_per_s)} | "
                    f"{secs(m.model_s)} | {percent(m.error)} |")
    return rows


def fold_events(events: list[dict]) -> list[tuple[dict, int, dict]]:
    """Consecutive events with the same kind and message, as (first, count, last)."""
    folded: list[tuple[dict, int, dict]] = []
    for e in events:
        if folded and (folded[-1][0]["kind"], folded[-1][0]["message"]) == (e["kind"],
                                                                           e["message"]):
            first, n, _ = folded[-1]
            folded[-1] = (first, n + 1, e)
        else:
            folded.append((e, 1, e))
    return folded


def _event_line(report: RunReport, first: dict, n: int, last: dict) -> str:
    origin = report.run.get("started") or report.run["created"]
    when = _ago(first["time"] - origin)
    if n > 1:
        when += f" to {_ago(last['time'] - origin)}, {n} times"
    return f"`{when}` {_md(first['kind'])}: {_md(first['message'])}"


def _event_lines(report: RunReport) -> list[str]:
    if not report.events:
        return ["No events were stored for this run."]
    folded = fold_events(report.events)
    lines = [f"- {_event_line(report, *f)}" for f in folded[:MAX_EVENT_LINES]]
    if len(folded) > MAX_EVENT_LINES:
        lines.append(f"- and {len(folded) - MAX_EVENT_LINES} more in events.csv")
    return lines


def routine(report: RunReport, event: dict) -> bool:
    """An event that every good run has: its launch, placement and clean end."""
    if event["kind"] in ROUTINE_EVENTS:
        return True
    clean_end = report.run["status"] == DONE
    return clean_end and event["kind"] in ("end", "finished")


def _went_wrong(reports: list[RunReport]) -> list[str]:
    lines = []
    for r in reports:
        folded = fold_events([e for e in r.events if not routine(r, e)])
        who = f"{_md(r.label)}: " if len(reports) > 1 else ""
        lines += [f"- {who}{_event_line(r, *f)}" for f in folded[:MAX_EVENT_LINES]]
        if len(folded) > MAX_EVENT_LINES:
            lines.append(f"- {who}and {len(folded) - MAX_EVENT_LINES} more in events.csv")
    return lines or [("Nothing: no image pull, recompile, retry, requeue, warning or failure "
                     "was recorded.")]


def _run_section(index: int, report: RunReport, data_dir: str) -> list[str]:
    total = f", {report.steps_total} steps" if report.steps_total else ""
    lines = [(f"## Run {index}: {_md(report.label)} — "
             f"{describe_placement(report.config)}{total}"), ""]
    lines.append(f"- {_outcome(report)}")
    if not report.steps:
        reason = f" ({report.run['exit_reason']})" if report.run.get("exit_reason") else ""
        lines.append(f"- No steps were stored for this run: it ended {report.run['status']}"
                     f"{reason}, so there is no step time, drift or loss to report.")
    else:
        lines += [f"- {line}" for line in _timing(report)]
        lines += ["", *_loss_table(report), ""]
        lines += [f"- {line}" for line in _loss_lines(report)]
    if report.model_rows:
        lines += ["", (f"Step model: the baseline pass ({len(report.baseline)} steps) and the "
                      f"asked config, median of steps 6–N:"), "", *_model_table(report)]
        if report.model_notes:
            lines += ["", *report.model_notes]
    lines += ["", "Events:", "", *_event_lines(report), ""]
    lines.append(f"Step log: [{report.slug}.jsonl]({data_dir}/{report.slug}.jsonl).")
    return lines


def _comparison(reports: list[RunReport]) -> list[str]:
    rows = [("| run | config | status | steps | median step (6–N) | tok/s | 6–25 median "
            "| step-1 loss | last loss |"),
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in reports:
        total = f"/{r.steps_total}" if r.steps_total else ""
        rows.append(
            f"| {_md(r.label)} | {describe_placement(r.config)} | {r.run['status']} | "
            f"{len(r.steps)}{total} | {secs(r.summary.median_step_s)} | "
            f"{rate(r.summary.tokens_per_s)} | {secs(r.drift.early_median_s)} | "
            f"{loss(r.summary.first_loss)} | {loss(r.summary.last_loss)} |")
    return rows


def render(reports: list[RunReport], *, slug: str, now: float) -> str:
    """The note's markdown. ``slug`` names the data folder beside it."""
    date = datetime.fromtimestamp(now).strftime("%Y-%m-%d")
    data_dir = f"data/{slug}"
    title = ", ".join(r.label for r in reports)
    if len(reports) == 1:
        title += f": {describe_placement(reports[0].config)}"
        if reports[0].steps_total:
            title += f", {reports[0].steps_total} steps"
    ids = ", ".join(str(r.id) for r in reports)
    lines = [
        f"# {_md(title)}", "",
        (f"Written by `rngdctl export` on {date} from run{'s' if len(reports) > 1 else ''} "
        f"{ids}. Every number below is computed from the rngdctl store; the data are in "
        f"[{data_dir}/]({data_dir}/)."), "",
        "## Verification", "",
        f"- Code: {_one_or_each(reports, _code)}.",
        f"- Hardware: {_one_or_each(reports, _hardware)}.",
        f"- Recipe: {_one_or_each(reports, lambda r: describe_recipe(r.config))}.",
        f"- Launch: {_one_or_each(reports, _launch)}.",
        f"- Pre-submit checks {_checks_line(reports)}",
        "",
    ]
    if len(reports) > 1:
        lines += ["## Comparison", "", *_comparison(reports), ""]
    for i, report in enumerate(reports, 1):
        lines += _run_section(i, report, data_dir) + [""]
    lines += ["## What went wrong", "", *_went_wrong(reports), ""]
    lines += [
        "## Data", "",
        f"In [{data_dir}/]({data_dir}/):", "",
        *[f"- `{r.slug}.jsonl`: {r.label}'s step log in the step-record contract "
          f"({len(r.passes)} start, {len(r.steps) + len(r.baseline)} step, "
          f"{len(r.events)} event records)." for r in reports],
        "- `gate-checks.csv`: every pre-submit check, one row per gate.",
        "- `host-load.csv`: the host-load samples taken while the runs ran.",
        "- `events.csv`: every event, unfolded.",
        "",
    ]
    return "\n".join(lines)


# === The data folder =========================================================


def step_log(report: RunReport) -> list[str]:
    """The run's records as contract lines: starts, steps, events, then the end."""
    run = report.run
    lines = []
    passes = report.passes or [{"config_label": records.MAIN, "config": report.config,
                                "time": run.get("started")}]
    by_label = {records.MAIN: report.steps, records.BASELINE: report.baseline}
    labels = [p["config_label"] for p in passes]
    # Baseline first: it runs first in the Job.
    for p in sorted(passes, key=lambda p: (p["config_label"] != records.BASELINE,
                                           p.get("time") or 0)):
        lines.append(records.dumps(records.Start(
            config_label=p["config_label"], config=p.get("config") or {},
            run_id=str(run["id"]), versions=run.get("versions") or {}, git=run.get("git"),
            host=run.get("host"), time=p.get("time") or run.get("started") or run["created"])))
        for s in by_label.get(p["config_label"], []):
            lines.append(_step_line(s))
    for label, steps in by_label.items():
        if label not in labels:
            lines += [_step_line(s) for s in steps]
    for e in report.events:
        if e["kind"] == "end":
            continue
        lines.append(records.dumps(records.Event(event=e["kind"], message=e["message"],
                                                 data=e.get("data") or {}, time=e["time"])))
    if run["status"] in _END_STATUS:
        lines.append(records.dumps(records.End(
            status=_END_STATUS[run["status"]], error=run.get("exit_reason"),
            time=run.get("ended") or run["created"])))
    return lines


def _step_line(s: dict) -> str:
    return records.dumps(records.Step(
        config_label=s["config_label"], step=s["step"],
        loss=float("nan") if s["loss"] is None else float(s["loss"]),
        step_s=s["step_s"], tokens=s["tokens"],
        lr=float("nan") if s.get("lr") is None else s["lr"],
        phases=s.get("phases") or {}, memory=s.get("memory") or {},
        time=s.get("time") or 0.0, extra=s.get("extra") or {}))


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def _cell(value) -> object:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return value


def write_data(reports: list[RunReport], data_dir: Path) -> None:
    data_dir.mkdir(parents=True)
    for r in reports:
        (data_dir / f"{r.slug}.jsonl").write_text("".join(line + "\n" for line in step_log(r)),
                                                   encoding="utf-8")
    _write_csv(data_dir / "gate-checks.csv",
               ["time", "run_id", "check_id", "passed", "gate", "reading", "threshold",
                "verdict", "detail", "checks", "last_time", "load_min", "load_max"],
               [[c["time"], r.id, c["id"], int(c["passed"]), g.get("name"),
                 _cell(g.get("reading")), _cell(g.get("threshold")), g.get("verdict"),
                 _cell(g.get("detail")), _checks_in(c), _cell(c.get("last_time") or c["time"]),
                 _cell(c.get("load_min")), _cell(c.get("load_max"))]
                for r in reports for c in r.gate_checks for g in c["gates"]])
    # A row is one sample, or (samples > 1) a minute folded by compaction: load1 is
    # then the minute's mean, load1_min/load1_max its range.
    _write_csv(data_dir / "host-load.csv",
               ["time", "run_id", "load1", "load5", "load15", "holders", "cards_free",
                "samples", "load1_min", "load1_max"],
               [[s["time"], r.id, s["load1"], s["load5"], s["load15"],
                 _cell(s.get("holder_count")), _cell(s.get("cards_free")), s.get("n") or 1,
                 _cell(s.get("load1_min", s["load1"]) if s.get("n") else s["load1"]),
                 _cell(s.get("load1_max", s["load1"]) if s.get("n") else s["load1"])]
                for r in reports for s in r.samples])
    _write_csv(data_dir / "events.csv", ["time", "run_id", "kind", "message", "data"],
               [[e["time"], r.id, e["kind"], e["message"], _cell(e.get("data"))]
                for r in reports for e in r.events])


# === Writing the note ========================================================


def note_slug(reports: list[RunReport]) -> str:
    slug = "-".join(dict.fromkeys(r.slug for r in reports))
    return slug[:80].strip("-")


def _free_name(out_dir: Path, date: str, slug: str) -> str:
    """``slug``, or ``slug-2``, ``slug-3``... so that neither note nor data folder exists."""
    candidate, n = slug, 1
    while (out_dir / f"{date}-{candidate}.md").exists() or (out_dir / "data" / candidate).exists():
        n += 1
        candidate = f"{slug}-{n}"
    return candidate


def build(store: Store, run_ids: list[int | str], *,
          k8s: K8sConfig | None = None) -> list[RunReport]:
    """One report per run, in the order given (a run named twice counts once)."""
    if not run_ids:
        raise BadInput("export needs at least one run")
    reports: list[RunReport] = []
    for ref in run_ids:
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


def write_note(store: Store, run_ids: list[int | str], out_dir: str | Path, *,
               now: float | None = None, k8s: K8sConfig | None = None) -> Path:
    """Write the note for ``run_ids`` under ``out_dir``; returns the note's path.

    Never overwrites: when the note or its data folder exists, the slug gets a
    suffix (``-2``, ``-3``...). Raises NoSuchRun for an unknown run and
    BadInput when the folder cannot be written.
    """
    return write_note_reports(build(store, run_ids, k8s=k8s), out_dir, now=now)[0]


def write_note_reports(reports: list[RunReport], out_dir: str | Path, *,
                       now: float | None = None) -> tuple[Path, Path]:
    """Write the note for reports already built; returns (note, data folder)."""
    now = time.time() if now is None else now
    out = Path(out_dir)
    date = datetime.fromtimestamp(now).strftime("%Y-%m-%d")
    try:
        out.mkdir(parents=True, exist_ok=True)
        slug = _free_name(out, date, note_slug(reports))
        data_dir = out / "data" / slug
        write_data(reports, data_dir)
        note = out / f"{date}-{slug}.md"
        with note.open("x", encoding="utf-8") as f:
            f.write(render(reports, slug=slug, now=now))
    except FileExistsError as exc:
        raise BadInput(f"{exc.filename} appeared while exporting; run export again") from None
    except OSError as exc:
        raise BadInput(f"cannot write the note under {out}: {exc.strerror}") from None
    return note, data_dir


# === The step-model table in docs/design.md ==================================


def design_rows(store: Store, reports: list[RunReport]) -> list[stepmodel.DesignRow]:
    """A step-model table row for each run the model could price."""
    return [stepmodel.design_row(r.comparison, run=r.label,
                                 hardware=stepmodel.hardware_of(store, r.id))
            for r in reports if r.comparison is not None]


def check_design(design_md: str | Path) -> Path:
    """``design_md`` when it exists; BadInput otherwise (it is edited, never created)."""
    path = Path(design_md)
    if not path.is_file():
        raise BadInput(f"--update-design: no {path} here (run export from the repository root)")
    return path


def update_design(store: Store, reports: list[RunReport], design_md: str | Path) -> int:
    """Add the runs' rows to the step-model table in ``design_md``; returns rows added."""
    path = check_design(design_md)
    rows = design_rows(store, reports)
    if rows:
        stepmodel.update_design_table(path, rows)
    return len(rows)
