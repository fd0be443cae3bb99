"""The note's markdown, from the reports ``collect`` built (no store access here)."""

from __future__ import annotations

from bisect import bisect_right
from datetime import datetime

from daemon.run import output
from daemon.stepmodel import stats
from daemon.store import DONE, FAILED, FINISHED, OOM, TIMEOUT
from rngdctl import card_units
from rngdctl.export.collect import RunReport
from rngdctl.export.words import (
    _DASH,
    _ago,
    _finite,
    _get,
    _md,
    _span,
    code,
    describe_placement,
    describe_recipe,
    load_span,
    loss,
    percent,
    rate,
    secs,
)
from trainer import records

#: The 6-N median may differ from the 6-25 median by this fraction before the
#: note says that step time drifted.
DRIFT_TOLERANCE = 0.05

#: At most this many event lines per run in the note (repeats are folded
#: first); the data folder's events.csv has them all.
MAX_EVENT_LINES = 25

_GATE_WORDS = {
    "host_load": "host load",
    "device_idle": "no process holding /dev/rngd",
    "cards_free": "cards free",
    "image_present": "image present",
    "one_at_a_time": "no other run active",
}

#: What "What went wrong" lists: failures, retries, resumes (and a host that changed
#: between the passes, from the step model). Everything else a run records (its launch,
#: placement, settling, compiles, notifications, an adoption by a restarted daemon,
#: checkpoints, the save) is how a run goes: it stays in the run's own event list.
FAILURES = frozenset({
    "error", "launch_failed", "follow_failed", "abandon", "deadline", "dependency",
    "image_pull", "prepull_failed", "admission_rejected", "evicted", "foreign_holder",
    "unknown_job", "malformed", "nonfinite_loss", "notify_failed",
    records.CHECKPOINT_FAILED, records.CHECKPOINT_BAD})
RETRIES = frozenset({"retry", "requeue"})
RESUMES = frozenset({records.RESUME, "resume_requested"})
#: The trainer's ``end`` and the daemon's ``finished``: a failure only with these statuses.
FAILED_ENDS = frozenset({"error", "oom", FAILED, TIMEOUT})


# === Rendering ===============================================================


def _one_or_each(reports: list[RunReport], value) -> str:
    """One value when every run agrees, else each run's."""
    values = [value(r) for r in reports]
    if len(set(values)) == 1:
        return values[0]
    return "; ".join(f"{_md(r.label)}: {v}" for r, v in zip(reports, values))


def _code(report: RunReport) -> str:
    git = report.run.get("git")
    versions = report.run.get("versions") or {}
    parts = [f"git {_md(git[:12])}" if git else "git commit not recorded"]
    parts += [f"{_md(name)} {_md(version)}" for name, version in sorted(versions.items())]
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
    parts = [f"backend {_md(_get(report.config, 'backend', default=_DASH))}"]
    if run.get("node"):
        parts.append(f"node {_md(run['node'])}")
    if run.get("host"):
        parts.append(f"host {_md(run['host'])}")
    if run.get("launcher") == "k8s":
        job = job_launched(report) or {}
        image = job.get("image") or _get(report.config, "image") or (
            report.k8s.image if report.k8s else None)
        if image:
            parts.append(f"image {_md(image)}")
        parts.append(f"image digest {_md(run['image_digest'])}" if run.get("image_digest")
                     else "image digest not recorded")
    elif run.get("image_digest"):
        parts.append(f"image digest {_md(run['image_digest'])}")
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
            how += f"Job {_md(job.get('namespace') or '?')}/{_md(job['job'])}"
            how += f" on node {_md(job['node'])}" if job.get("node") else ""
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
        how = f"the {_md(launcher)} launcher, one run at a time"
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
    done = report.steps_done
    total = report.steps_total
    parts = [f"{done}/{total} steps" if total else f"{done} steps"]
    status = run["status"]
    parts.append("OOM" if status == OOM else "no OOM")
    if status not in (DONE, OOM):
        reason = f": {_md(run['exit_reason'])}" if run.get("exit_reason") else ""
        parts.append(f"status {status}{reason}")
    parts.append(_attempts(run.get("attempts")))
    line = ", ".join(parts) + "."
    span = load_span(report.host_load)
    if span:
        line += f" Host load was {span}."
    if report.cards:
        line += (" Cards (furiosa-smi): "
                 + "; ".join(card_units.card_range(c) for c in report.cards) + ".")
    return line


def _throttled(report: RunReport) -> list[str]:
    """A card that throttled during the run, said beside the step times it explains."""
    lines = []
    for card in report.cards:
        text = card_units.throttle_text(card)
        if text:
            lines.append(f"**{text}, {_when(report, card['throttled_from'])} to "
                         f"{_when(report, card['throttled_until'])}**: the step times of that "
                         f"stretch are the throttled card's.")
    return lines


def _timing(report: RunReport) -> list[str]:
    s, d = report.summary, report.drift
    last = report.last_step
    if last <= stats.WARMUP_STEPS:
        return [(f"Median step over all {report.steps_done} steps (the run is shorter than "
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
    held = report.held_out
    rows = ["| steps | mean loss | median step |" + (" held-out loss |" if held.points else ""),
            "| --- | --- | --- |" + (" --- |" if held.points else "")]
    for r in report.loss_rows:
        bad = r.nonfinite
        mean = loss(r.mean_loss, 3) if r.mean_loss is not None else (
            "NaN" if bad else _DASH)
        if bad and r.mean_loss is not None:
            mean += f" ({bad} non-finite left out)"
        row = f"| {_span(r.first, r.last)} | {mean} | {secs(r.median_step_s)} |"
        if held.points:
            point = held.last_in(r.first, r.last)  # the range's newest evaluation
            row += f" {loss(point['loss'], 3)} (step {point['step']}) |" if point else \
                f" {_DASH} |"
        rows.append(row)
    return rows


def _held_out_line(report: RunReport) -> str | None:
    """The held-out loss before training, at its end and at its lowest, and what the
    evaluations cost (outside every step's time)."""
    held = report.held_out
    if not held.points:
        return None
    first, last, best = held.points[0], held.last, held.best
    examples = last["examples"]
    line = f"Held-out loss over {examples:,} example{'s' if examples != 1 else ''}"
    line += f" ({last['tokens']:,} tokens): "
    parts = []
    if first["step"] == 0 and last["step"] != 0:
        parts.append(f"{loss(first['loss'])} before the first step")
    parts.append(f"{loss(last['loss'])} after step {last['step']} "
                 f"(perplexity {_perplexity(last['perplexity'])})")
    line += ", ".join(parts)
    if best is not None and best["step"] != last["step"]:
        line += f"; the lowest was {loss(best['loss'])} at step {best['step']}"
    n = len(held.points)
    seconds = sum(p["seconds"] for p in held.points)
    return line + (f". {n} evaluation{'s' if n != 1 else ''} took {secs(seconds)} in all, "
                   "outside every step's time.")


def _perplexity(x: float | None) -> str:
    return f"{x:.4g}" if _finite(x) else loss(x)


def _output_lines(report: RunReport) -> list[str]:
    """The model folder and how to load it, the checkpoints, the resumes."""
    found = report.output
    if found is None:
        return []
    model = found.model
    what = output.FORMAT_WORDS.get(model.format, model.format)
    if model.ours:
        size = f", {output.size_words(model.bytes)}" if model.bytes is not None else ""
        lines = [(f"Model: saved to {code(model.path)} ({what}{size}). Load it with "
                  f"{code(model.load_line())}.")]
    elif model.written:  # no load line: what is there now is not this run's model
        lines = [(f"Model: saved to {code(model.path)} ({what}), now "
                  f"{_md(output.state_words(model))}.")]
    elif report.run["status"] in FINISHED:
        lines = [f"Model: not written; its folder was {code(model.path)}."]
    else:
        lines = [(f"Model: not written yet; {what} go to {code(model.path)} at the end of the "
                 f"run.")]
    if found.checkpoints:
        on_disk = sum(c.on_disk for c in found.checkpoints)
        line = (f"Checkpoints: {len(found.checkpoints)} written, {on_disk} still on disk seen "
                f"from here")
        newest = found.newest_checkpoint()
        if newest is not None:
            line += f"; the newest, step {newest.step}, is {code(newest.path)}"
        lines.append(line + ".")
    resumed = output.resumes_words(found)
    if resumed:
        again = found.steps_redone
        total = (f": {again} step{'s' if again != 1 else ''} trained twice in all"
                 if len(found.resumes) > 1 else "")
        lines.append(_md(f"{resumed[0].upper()}{resumed[1:]}{total}."))
    else:
        lines.append("It never resumed from a checkpoint.")
    return lines


def _loss_lines(report: RunReport) -> list[str]:
    main = report.main
    lines = [f"Step {main.step_span[0]} loss is {loss(main.first_loss)}."]
    bad = main.nonfinite_losses
    if bad:
        kinds = sorted({loss(x) for x in main.nonfinite_kinds})
        lines.append(f"{bad} step{'s' if bad != 1 else ''} had a non-finite loss "
                     f"({', '.join(kinds)}), first at step {main.nonfinite_first}; the loss "
                     f"table's means leave them out.")
    return lines


def _model_table(report: RunReport) -> list[str]:
    rows = ["| run | step | measured as | tok/s | model | error |",
            "| --- | --- | --- | --- | --- | --- |"]
    for m in report.model_rows:
        rows.append(f"| {_md(m.label)} | {secs(m.measured_s)} | {_md(m.figure)} | "
                    f"{rate(m.tokens_per_s)} | {secs(m.model_s)} | {percent(m.error)} |")
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


def _when(report: RunReport, t: float, *, name: bool = True) -> str:
    """``t`` from the launch of the attempt it belongs to ("+12s"), the attempt named when
    there were several ("attempt 2 +12s"); before any launch, from the run's creation
    ("queued +3s")."""
    starts = report.attempt_starts
    attempt = bisect_right(starts, t)
    if not attempt:
        return f"queued {_ago(t - report.run['created'])}"
    stamp = _ago(t - starts[attempt - 1])
    return f"attempt {attempt} {stamp}" if name and len(starts) > 1 else stamp


def _event_line(report: RunReport, first: dict, n: int, last: dict) -> str:
    when = _when(report, first["time"])
    if n > 1:
        same = bisect_right(report.attempt_starts, first["time"]) == bisect_right(
            report.attempt_starts, last["time"])
        when += f" to {_when(report, last['time'], name=not same)}, {n} times"
    return f"`{when}` {_md(first['kind'])}: {_md(first['message'])}"


def _event_lines(report: RunReport) -> list[str]:
    if not report.events:
        return ["No events were stored for this run."]
    folded = fold_events(report.events)
    lines = [f"- {_event_line(report, *f)}" for f in folded[:MAX_EVENT_LINES]]
    if len(folded) > MAX_EVENT_LINES:
        lines.append(f"- and {len(folded) - MAX_EVENT_LINES} more in events.csv")
    return lines


def went_wrong(event: dict) -> bool:
    """A failure, a retry or a resume: what "What went wrong" lists."""
    kind = event["kind"]
    if kind in FAILURES or kind in RETRIES or kind in RESUMES:
        return True
    if kind in ("end", "finished"):
        status = (event.get("data") or {}).get("status") or event["message"].split(":")[0]
        return status in FAILED_ENDS
    return False


def _went_wrong(reports: list[RunReport]) -> list[str]:
    lines = []
    for r in reports:
        who = f"{_run_name(r)}: " if len(reports) > 1 else ""
        notice = r.comparison.host_notice() if r.comparison is not None else None
        if notice:
            lines.append(f"- {who}{notice[0].upper()}{notice[1:]}.")
        folded = fold_events([e for e in r.events if went_wrong(e)])
        lines += [f"- {who}{_event_line(r, *f)}" for f in folded[:MAX_EVENT_LINES]]
        if len(folded) > MAX_EVENT_LINES:
            lines.append(f"- {who}and {len(folded) - MAX_EVENT_LINES} more in events.csv")
    return lines or ["Nothing: no failure, retry, resume or change of host was recorded."]


def _run_name(report: RunReport) -> str:
    """"run 9", or "run 9 (demo)": a run's id first, so that no heading reads as another's."""
    name = report.run.get("name")
    return f"run {report.id}" + (f" ({_md(name)})" if name else "")


def _run_section(report: RunReport, data_dir: str) -> list[str]:
    total = f", {report.steps_total} steps" if report.steps_total else ""
    # Headed by the run's id (and its name): "Run 1" of a note of runs 9 and 10 read as run 1.
    name = report.run.get("name")
    lines = [(f"## Run {report.id}{f': {_md(name)}' if name else ''} — "
             f"{describe_placement(report.config)}{total}"), ""]
    lines.append(f"- {_outcome(report)}")
    if not report.steps_done:  # export refuses a run with no steps at all: a baseline only
        reason = f" ({_md(report.run['exit_reason'])})" if report.run.get("exit_reason") \
            else ""
        lines.append(f"- Only the baseline pass stored steps: the run is "
                     f"{report.run['status']}{reason}, so there is no step time, drift or loss "
                     f"of the asked config to report.")
    else:
        lines += [f"- {line}" for line in _timing(report) + _throttled(report)]
        lines += ["", *_loss_table(report), ""]
        lines += [f"- {line}" for line in _loss_lines(report)]
        held_out = _held_out_line(report)
        if held_out:
            lines.append(f"- {held_out}")
    lines += [f"- {line}" for line in _output_lines(report)]
    if report.model_rows:
        lines += ["", (f"Step model: the baseline pass ({report.baseline.steps} steps) and the "
                      f"asked config; the error is the model's against the measured step of "
                      f"its row, which names its figure:"), "", *_model_table(report)]
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
            f"{r.steps_done}{total} | {secs(r.summary.median_step_s)} | "
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
        f"- Recipe: {_one_or_each(reports, lambda r: _md(describe_recipe(r.config)))}.",
        f"- Launch: {_one_or_each(reports, _launch)}.",
        f"- Pre-submit checks {_checks_line(reports)}",
        "",
    ]
    if len(reports) > 1:
        lines += ["## Comparison", "", *_comparison(reports), ""]
    for report in reports:
        lines += _run_section(report, data_dir) + [""]
    lines += ["## What went wrong", "", *_went_wrong(reports), ""]
    lines += [
        "## Data", "",
        f"In [{data_dir}/]({data_dir}/):", "",
        *[f"- {code(r.slug + '.jsonl')}: {_md(r.label)}'s step log in the step-record contract "
          f"({len(r.passes)} start, {r.main.steps + r.baseline.steps} step, "
          + (f"{len(r.held_out.points)} eval, " if r.held_out.points else "")
          + f"{len(r.events)} event records)." for r in reports],
        "- `gate-checks.csv`: every pre-submit check, one row per gate.",
        "- `host-load.csv`: the host-load samples taken while the runs ran.",
        *(["- `card-samples.csv`: each card's furiosa-smi readings while the runs held it."]
          if any(r.cards for r in reports) else []),
        "- `events.csv`: every event, unfolded.",
        "",
    ]
    return "\n".join(lines)
