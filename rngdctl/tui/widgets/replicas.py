"""The replicas line under the daemon bar: which daemon replica leads, since when, and its
standbys' heartbeats. Hidden without leader election (one daemon: the bar says it all)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from daemon.scheduling.replicas import Replicas
from rngdctl.tui.widgets._update import update_if_changed

#: Styles of the line's pieces, by kind (daemon/scheduling/replicas.py ``Replicas.segments``).
STYLES = {"leader": "bold green", "standby": "bold", "silent": "bold red"}


def replicas_text(view: Replicas) -> Text:
    """The same words as `runs` and `show` print, styled by piece."""
    text = Text()
    for piece, kind in view.segments():
        text.append(piece, STYLES.get(kind, ""))
    return text


class ReplicasBar(Static):
    """One line; shown (class ``shown``) only while replicas take turns."""

    def show(self, view: Replicas) -> None:
        self.set_class(view.elected, "shown")
        update_if_changed(self, replicas_text(view))
