"""What a person reads on the trainer's stderr: human lines and the step progress.

Records never come here (stdout or ``--log``). Without ``--log`` stdout carries
the records, so the progress is a line at the first step, every tenth and the
last, as every other line is. With ``--log`` stdout is quiet: on a terminal the
progress is one line rewritten in place at every step, ended by the next human
line so that none is lost; elsewhere (a file, a pipe) it is those same lines.
"""

from __future__ import annotations

import sys
import time

#: Without a terminal to rewrite a line on, a step's progress line is printed at
#: the first step, every this many and the last.
EVERY = 10


class Console:
    def __init__(self, stream=None):
        self._stream = stream
        #: ``--log`` given: the progress is the one line a person follows.
        self.progress = False
        self._open = False  # a progress line is on screen without its newline

    @property
    def stream(self):
        return self._stream or sys.stderr  # looked up late: tests swap sys.stderr

    def line(self, message: str) -> None:
        """One human line, stamped."""
        self._end_progress()
        print(f"[trainer {time.strftime('%H:%M:%S')}] {message}", file=self.stream, flush=True)

    def step(self, label: str, step: int, steps: int, loss: float, step_s: float) -> None:
        text = f"{label} step {step}/{steps} loss {loss:.4f} {step_s * 1000:.1f} ms"
        if self.progress and _is_terminal(self.stream):
            self.stream.write(f"\r\x1b[K[trainer {time.strftime('%H:%M:%S')}] {text}")
            self.stream.flush()
            self._open = True
        elif step == 1 or step % EVERY == 0 or step == steps:
            self.line(text)

    def _end_progress(self) -> None:
        if self._open:
            self.stream.write("\n")
            self._open = False


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


#: The trainer's one console (a process has one stderr).
console = Console()


def log(message: str) -> None:
    """A human line on stderr."""
    console.line(message)
