"""Ingest: trainer output lines into the store, idempotently.

The same line fed twice stores its step once (the store ignores a step it
has), and its eval (held-out loss) once; events from the trainer are stored
once by their time and text. A resumed trainer writes the steps and evals after
its checkpoint again: the store keeps the first copy of each.

No line can stop ingest: ``records.parse_line`` turns anything into a record,
a log line or a ``Malformed`` one, and a record the store still refuses is
counted as malformed too. Only a store that cannot be written at all (locked,
disk full: ``sqlite3.OperationalError``) raises, so the caller keeps its offset
and reads the same lines again next tick.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from daemon import faults
from daemon.run import plots
from daemon.store import Store
from trainer import records

#: What a record the parser accepted may still raise in the store: a bug in
#: the contract's checks, never a reason to stop reading the run.
LINE_ERRORS = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError,
               sqlite3.DataError, ValueError, TypeError, OverflowError, RecursionError)


@dataclass
class Fed:
    """What one batch of lines held."""

    new_steps: int = 0
    new_evals: int = 0
    end: records.End | None = None
    log_lines: list[str] = field(default_factory=list)
    malformed: int = 0


class Ingest:
    def __init__(self, store: Store):
        self.store = store

    def feed(self, run_id: int, lines: list[str]) -> Fed:
        fed = Fed()
        steps: list[tuple[records.Step, str]] = []
        evals: list[tuple[records.Eval, str]] = []
        for line in lines:
            parsed = records.parse_line(line)
            if isinstance(parsed, records.Step):
                steps.append((parsed, line))
                if parsed.loss_is_finite:
                    continue  # a finite step has nothing to record but its row (below)
            elif isinstance(parsed, records.Eval):
                evals.append((parsed, line))
                continue  # nothing to record but its row (below)
            try:
                self._record(run_id, parsed, fed)
            except LINE_ERRORS as exc:
                self._malformed(run_id, fed, records.Malformed(
                    getattr(parsed, "text", line), f"the store refused it: {exc!r}"))
        # Steps go in after the pass they belong to is known, in one transaction.
        fed.new_steps = self._store_each(run_id, steps, self.store.add_steps, fed)
        fed.new_evals = self._store_each(run_id, evals, self.store.add_evals, fed)
        if fed.new_steps:  # the passes' plots follow, so no reader has to read every step
            plots.keep_plots(self.store, run_id, sorted({s.config_label for s, _ in steps}),
                             every=plots.KEEP_PLOTS_EVERY)
        if fed.new_steps:
            faults.point("after_first_step")  # the steps are stored, the offset is not
        if fed.malformed:
            self.store.count_malformed(run_id, fed.malformed)
        return fed

    def _record(self, run_id: int, parsed: records.Parsed, fed: Fed) -> None:
        if isinstance(parsed, records.Step):
            if not parsed.loss_is_finite:
                self.store.add_event_once(
                    run_id, "nonfinite_loss",
                    f"{parsed.config_label} step {parsed.step}: loss is {parsed.loss}",
                    when=parsed.time)
        elif isinstance(parsed, records.Start):
            self.store.add_pass(run_id, parsed)
            self.store.update_run(run_id, versions=parsed.versions, git=parsed.git,
                                  host=parsed.host)
            if parsed.data:  # the data as the pass reads it: its padding, what was cut
                self.store.add_event_once(
                    run_id, "data", f"{parsed.config_label}: {records.describe_data(parsed.data)}",
                    data=parsed.data, when=parsed.time)
        elif isinstance(parsed, records.Event):
            self.store.add_event_once(run_id, parsed.event, parsed.message,
                                      data=parsed.data or None, when=parsed.time)
        elif isinstance(parsed, records.End):
            fed.end = parsed
            message = parsed.status + (f": {parsed.error}" if parsed.error else "")
            data = {**parsed.data, "status": parsed.status, "error": parsed.error}
            self.store.add_event_once(run_id, "end", message, data=data, when=parsed.time)
        elif isinstance(parsed, records.Malformed):
            self._malformed(run_id, fed, parsed)
        else:
            fed.log_lines.append(parsed.text)

    def _malformed(self, run_id: int, fed: Fed, bad: records.Malformed) -> None:
        fed.malformed += 1
        try:
            self.store.add_event_once(run_id, "malformed", f"{bad.reason}: {bad.text[:200]}",
                                      when=None)
        except LINE_ERRORS:  # the count above still says a line was refused
            self.store.add_event_once(run_id, "malformed", "a line the store could not keep",
                                      when=None)

    def _store_each(self, run_id: int, pairs: list[tuple[object, str]], add, fed: Fed) -> int:
        """``add(run_id, records)`` of the batch; when the store refuses it, record by record,
        so one record it refuses (as malformed) costs the batch nothing else."""
        try:
            return add(run_id, [record for record, _ in pairs])
        except LINE_ERRORS:
            pass
        new = 0
        for record, line in pairs:
            try:
                new += add(run_id, [record])
            except LINE_ERRORS as exc:
                self._malformed(run_id, fed, records.Malformed(
                    line, f"the store refused it: {exc!r}"))
        return new
