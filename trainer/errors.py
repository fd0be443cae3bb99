"""The trainer's exceptions. The CLI turns each into a record, a line and an exit code."""

from __future__ import annotations


class TrainerError(Exception):
    """An expected failure: one clear line, no traceback."""


class UsageError(TrainerError):
    """Bad input on the command line or in the data: exit 2."""


class BackendUnavailable(UsageError):
    """The asked backend cannot be used on this machine (package or device missing)."""


class Cancelled(TrainerError):
    """SIGTERM arrived and the run has no output folder: it stopped after a whole step."""


class Preempted(TrainerError):
    """SIGTERM arrived: the run stopped after a whole step and its checkpoint."""

    def __init__(self, message: str, checkpoint: str | None):
        super().__init__(message)
        self.checkpoint = checkpoint


class DeviceOutOfMemory(TrainerError):
    """A card (or the host) ran out of memory in a known layer and phase: exit 3."""

    def __init__(self, where: str, detail: str):
        super().__init__(f"out of memory in {where}: {detail}")
        self.where = where
        self.detail = detail
