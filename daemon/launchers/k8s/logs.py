"""Following a pod log across dropped streams without losing or repeating a line.

The log is read with ``timestamps=true``: each line starts with an RFC 3339
timestamp (nanoseconds, trailing zeros trimmed). A read resumes with
``sinceTime``, which the API takes in whole seconds, so it repeats the lines
of that second: the cursor remembers the last timestamp taken and how many
lines carried it, and skips exactly those.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


def parse_time(stamp: str) -> tuple[int, int] | None:
    """``2024-05-01T10:00:00.123Z`` -> (epoch seconds, nanoseconds), or None if not a stamp."""
    text = stamp.strip()
    if not text or not text[0].isdigit():
        return None
    if text.endswith("Z"):
        text, zone = text[:-1], "+00:00"
    elif len(text) > 6 and text[-6] in "+-" and text[-3] == ":":
        text, zone = text[:-6], text[-6:]
    else:
        return None
    whole, _, frac = text.partition(".")
    if frac and not frac.isdigit():
        return None
    try:
        moment = dt.datetime.fromisoformat(whole + zone)
    except ValueError:
        return None
    return int(moment.timestamp()), int((frac + "000000000")[:9]) if frac else 0


def second_of(key: tuple[int, int]) -> str:
    """The ``sinceTime`` value for a timestamp: its whole second, in UTC."""
    moment = dt.datetime.fromtimestamp(key[0], tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class LogCursor:
    """Where a pod log has been read to: the last timestamp taken and how many lines had it."""

    last: str | None = None
    taken_at_last: int = 0

    @property
    def since_time(self) -> str | None:
        key = parse_time(self.last) if self.last else None
        return second_of(key) if key else None

    def take(self, body: str, *, final: bool = False) -> list[str]:
        """The new lines of a log read (timestamps stripped), in order; advances the cursor.

        A last line without its newline is left for the next read, unless
        ``final`` (the container has ended: nothing more will come).
        """
        if not body:
            return []
        lines = body.split("\n")
        tail = lines.pop()  # "" after a final newline, or a partial line to read again later
        if final and tail:
            lines.append(tail)
        last_key = parse_time(self.last) if self.last else None
        seen_at_last = 0
        new: list[str] = []
        for line in lines:
            stamp, sep, text = line.partition(" ")
            key = parse_time(stamp) if sep or stamp else None
            if key is None:  # no timestamp: an API that ignored timestamps=true
                new.append(line.rstrip("\r"))
                continue
            if last_key is not None and key < last_key:
                continue
            if last_key is not None and key == last_key:
                if seen_at_last < self.taken_at_last:
                    seen_at_last += 1
                    continue
                self.taken_at_last += 1
                seen_at_last += 1
            else:
                last_key, self.last = key, stamp
                self.taken_at_last = seen_at_last = 1
            new.append(text.rstrip("\r"))
        return new
