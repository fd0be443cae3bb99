"""The cards panel: each card's newest furiosa-smi reading and its last minutes, from the
daemon's card samples (this host's, and with node agents every node's).

Read incrementally: each refresh asks the store for the rows after the last one
seen, and keeps per card the readings within ``CARDS_WINDOW_S``.
"""

from __future__ import annotations

from collections import deque

from rngdctl.tui.data.reader import Reader
from rngdctl.tui.data.views import CardRow, HolderRow

#: The panel's bars cover this many seconds; a card not read for as long is left out.
CARDS_WINDOW_S = 600.0


class CardViews(Reader):
    """The cards panel."""

    def cards(self, now: float, holders: tuple[HolderRow, ...] = ()) -> tuple[CardRow, ...]:
        """Every card read within the window, in node and card order; ``holders``: the
        holder rows, so that a card held by a process not of our runs names it."""
        kept: dict[tuple, deque] = self.__dict__.setdefault("_card_readings", {})
        since = now - CARDS_WINDOW_S
        after = self.__dict__.get("_card_cursor")
        rows = self.store.card_samples(since=since if after is None else None, after_id=after)
        for row in rows:
            self._card_cursor = max(row["id"], self.__dict__.get("_card_cursor") or 0)
            kept.setdefault((row["node"] or "", row["card"]), deque()).append(row)
        out = []
        for key in sorted(kept, key=lambda k: (k[0], len(k[1]), k[1])):
            readings = kept[key]
            while readings and readings[0]["time"] < since:
                readings.popleft()
            if not readings:
                del kept[key]
                continue
            out.append(_row(readings, now, holders))
        return tuple(out)


def _series(readings, name: str) -> tuple[float, ...]:
    return tuple(r[name] for r in readings if r[name] is not None)


def _row(readings, now: float, holders) -> CardRow:
    last = readings[-1]
    holder = None
    if last["run_id"] is None:
        held = next((h for h in holders if last["card"] in h.cards and h.pid is not None), None)
        if held is not None:
            holder = f"pid {held.pid} ({held.user})"
    return CardRow(
        node=last["node"], card=last["card"], age=max(0.0, now - last["time"]),
        alive=None if last["alive"] is None else bool(last["alive"]),
        temp_c=last["temp_c"], power_w=last["power_w"], power_limit_w=last["power_limit_w"],
        util=last["util"], memory_used=last["memory_used"], memory_total=last["memory_total"],
        throttle=tuple(last["throttle"] or ()), temps=_series(readings, "temp_c"),
        powers=_series(readings, "power_w"), utils=_series(readings, "util"),
        run=last["run_id"], holder=holder)
