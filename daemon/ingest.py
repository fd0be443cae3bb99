"""Ingest: trainer output lines into the store, idempotently.

The same line fed twice stores its step once (the store ignores a step it
has); events from the trainer are stored once by their time and text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.store import Store
from trainer import records


@dataclass
class Fed:
    """What one batch of lines held."""

    new_steps: int = 0
    end: records.End | None = None
    log_lines: list[str] = field(default_factory=list)
    malformed: int = 0


class Ingest:
    def __init__(self, store: Store):
        self.store = store

    def feed(self, run_id: int, lines: list[str]) -> Fed:
        fed = Fed()
        steps: list[records.Step] = []
        for line in lines:
            parsed = records.parse_line(line)
            if isinstance(parsed, records.Step):
                steps.append(parsed)
                if not parsed.loss_is_finite:
                    self.store.add_event_once(
                        run_id, "nonfinite_loss",
                        f"{parsed.config_label} step {parsed.step}: loss is {parsed.loss}",
                        when=parsed.time)
            elif isinstance(parsed, records.Start):
                self._start(run_id, parsed)
            elif isinstance(parsed, records.Event):
                self.store.add_event_once(run_id, parsed.event, parsed.message,
                                          data=parsed.data or None, when=parsed.time)
            elif isinstance(parsed, records.End):
                fed.end = parsed
                message = parsed.status + (f": {parsed.error}" if parsed.error else "")
                data = {**parsed.data, "status": parsed.status, "error": parsed.error}
                self.store.add_event_once(run_id, "end", message, data=data, when=parsed.time)
            elif isinstance(parsed, records.Malformed):
                fed.malformed += 1
                self.store.add_event_once(run_id, "malformed", f"{parsed.reason}: "
                                          f"{parsed.text[:200]}", when=None)
            else:
                fed.log_lines.append(parsed.text)
        # Steps go in after the pass they belong to is known, in one transaction.
        fed.new_steps = self.store.add_steps(run_id, steps)
        if fed.malformed:
            self.store.count_malformed(run_id, fed.malformed)
        return fed

    def _start(self, run_id: int, start: records.Start) -> None:
        self.store.add_pass(run_id, start)
        self.store.update_run(run_id, versions=start.versions, git=start.git, host=start.host)
