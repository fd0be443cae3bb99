"""Host probes: load average and the processes that hold RNGD device files.

A probe returns plain data (a ``HostReading``) so that a reading taken on
another node (``rngdctl agent``) can stand in for a local one. The holder scan
itself is trainer/devices.py's, which the trainer's backend also reads (a card
held at start) and which imports nothing of the daemon.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from trainer.devices import DEVICE_GLOBS, Holder, device_files, device_holders

__all__ = ["DEVICE_GLOBS", "Holder", "HostReading", "device_files", "device_holders",
           "load_average", "read_host"]


@dataclass(frozen=True)
class HostReading:
    time: float
    load: tuple[float, float, float]
    holders: tuple[Holder, ...]
    #: False when /proc of other users' processes could not be read (not root):
    #: their device files are then invisible.
    complete: bool
    unreadable: int = 0
    devices: tuple[str, ...] = field(default_factory=tuple)

    @property
    def visibility_note(self) -> str:
        if self.complete:
            return "every process visible"
        return (f"not root: {self.unreadable} processes of other users could not be "
                f"inspected, so their device files are invisible")


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def read_host(globs=DEVICE_GLOBS, proc: str = "/proc", now: float | None = None) -> HostReading:
    devices = device_files(globs)
    holders, unreadable = device_holders(globs, proc, devices)
    return HostReading(
        time=time.time() if now is None else now,
        load=load_average(),
        holders=tuple(holders),
        complete=unreadable == 0,
        unreadable=unreadable,
        devices=tuple(sorted(devices)),
    )
