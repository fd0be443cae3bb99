"""Writing the note: its data folder (step log and CSVs), the markdown file, and
the step-model rows of docs/design.md.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path

from daemon import stepmodel
from daemon.errors import BadInput
from daemon.home import K8sConfig
from daemon.store import CANCELLED, DONE, FAILED, OOM, TIMEOUT, Store
from rngdctl.export.collect import RunReport, _checks_in, build
from rngdctl.export.render import render
from trainer import records

_END_STATUS = {DONE: "ok", OOM: "oom", CANCELLED: "cancelled", FAILED: "error",
               TIMEOUT: "error"}


# === The data folder =========================================================


def step_log(report: RunReport) -> Iterator[str]:
    """The run's records as contract lines: starts, each pass's steps and its evals (the
    held-out loss), events, then the end.

    A generator: the steps come from the store one batch at a time, so a run
    of any length is written in constant memory.
    """
    run = report.run
    passes = report.passes or [{"config_label": records.MAIN, "config": report.config,
                                "time": run.get("started")}]
    logged = (records.MAIN, records.BASELINE)
    labels = [p["config_label"] for p in passes]
    # Baseline first: it runs first in the Job.
    for p in sorted(passes, key=lambda p: (p["config_label"] != records.BASELINE,
                                           p.get("time") or 0)):
        yield records.dumps(records.Start(
            config_label=p["config_label"], config=p.get("config") or {},
            run_id=str(run["id"]), versions=run.get("versions") or {}, git=run.get("git"),
            host=run.get("host"), time=p.get("time") or run.get("started") or run["created"]))
        if p["config_label"] in logged:
            yield from _pass_lines(report, p["config_label"])
    for label in logged:
        if label not in labels:
            yield from _pass_lines(report, label)
    for e in report.events:
        if e["kind"] == "end":
            continue
        yield records.dumps(records.Event(event=e["kind"], message=e["message"],
                                          data=e.get("data") or {}, time=e["time"]))
    if run["status"] in _END_STATUS:
        yield records.dumps(records.End(
            status=_END_STATUS[run["status"]], error=run.get("exit_reason"),
            time=run.get("ended") or run["created"]))


def _pass_lines(report: RunReport, label: str) -> Iterator[str]:
    yield from map(_step_line, report.store.iter_steps(report.id, label))
    for e in report.store.evals(report.id, label):
        yield records.dumps(records.Eval(
            config_label=label, step=e["step"], loss=e["loss"], tokens=e["tokens"],
            examples=e["examples"], seconds=e["seconds"], time=e["time"] or 0.0))


def _step_line(s: dict) -> str:
    return records.dumps(records.Step(
        config_label=s["config_label"], step=s["step"],
        loss=float("nan") if s["loss"] is None else float(s["loss"]),
        step_s=s["step_s"], tokens=s["tokens"],
        lr=float("nan") if s.get("lr") is None else s["lr"],
        phases=s.get("phases") or {}, memory=s.get("memory") or {},
        time=s.get("time") or 0.0, extra=s.get("extra") or {}))


def _write_csv(path: Path, header: list[str], rows: Iterable[list]) -> None:
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
        with (data_dir / f"{r.slug}.jsonl").open("w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in step_log(r))
    _write_csv(data_dir / "gate-checks.csv",
               ["time", "run_id", "check_id", "passed", "gate", "reading", "threshold",
                "verdict", "detail", "checks", "last_time", "load_min", "load_max"],
               ([c["time"], r.id, c["id"], int(c["passed"]), g.get("name"),
                 _cell(g.get("reading")), _cell(g.get("threshold")), g.get("verdict"),
                 _cell(g.get("detail")), _checks_in(c), _cell(c.get("last_time") or c["time"]),
                 _cell(c.get("load_min")), _cell(c.get("load_max"))]
                for r in reports for c in r.gate_checks for g in c["gates"]))
    # A row is one sample, or (samples > 1) a minute folded by compaction: load1 is
    # then the minute's mean, load1_min/load1_max its range.
    _write_csv(data_dir / "host-load.csv",
               ["time", "run_id", "load1", "load5", "load15", "holders", "cards_free",
                "samples", "load1_min", "load1_max"],
               ([s["time"], r.id, s["load1"], s["load5"], s["load15"],
                 _cell(s.get("holder_count")), _cell(s.get("cards_free")), s.get("n") or 1,
                 _cell(s.get("load1_min", s["load1"]) if s.get("n") else s["load1"]),
                 _cell(s.get("load1_max", s["load1"]) if s.get("n") else s["load1"])]
                for r in reports for s in r.store.iter_samples(r.id)))
    if any(r.cards for r in reports):
        # A row is one reading, or (readings > 1) a minute folded by compaction: the
        # values are then the minute's means, *_min/*_max their range.
        columns = ["node", "card", "uuid", "alive", "temp_c", "temp_min", "temp_max",
                   "ambient_c", "power_w", "power_min", "power_max", "power_limit_w", "util",
                   "util_min", "util_max", "memory_used", "memory_total", "cores_occupied",
                   "throttle", "throttled"]
        _write_csv(data_dir / "card-samples.csv", ["time", "run_id", "readings", *columns],
                   ([c["time"], r.id, c.get("n") or 1, *(_cell(c.get(k)) for k in columns)]
                    for r in reports for c in r.store.iter_card_samples(r.id)))
    _write_csv(data_dir / "events.csv", ["time", "run_id", "kind", "message", "data"],
               ([e["time"], r.id, e["kind"], e["message"], _cell(e.get("data"))]
                for r in reports for e in r.events))


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




def write_note(store: Store, run_ids: list[int | str], out_dir: str | Path, *,
               now: float | None = None, k8s: K8sConfig | None = None) -> Path:
    """Write the note for ``run_ids`` under ``out_dir``; returns the note's path.

    Never overwrites: when the note or its data folder exists, the slug gets a
    suffix (``-2``, ``-3``...). Raises NoSuchRun for an unknown run and
    BadInput when the folder cannot be written.
    """
    return write_note_reports(build(store, run_ids, k8s=k8s), out_dir, now=now)[0]


def note_text(store: Store, run_id: int, *, now: float | None = None,
              k8s: K8sConfig | None = None) -> tuple[str, str]:
    """The note of one run as a file name and its markdown, written nowhere: what a tracker
    attaches (daemon/trackers/). Its data folder is not made: the tracker has the steps."""
    now = time.time() if now is None else now
    reports = build(store, [run_id], k8s=k8s)
    slug = note_slug(reports)
    date = datetime.fromtimestamp(now).strftime("%Y-%m-%d")
    return f"{date}-{slug}.md", render(reports, slug=slug, now=now)


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
