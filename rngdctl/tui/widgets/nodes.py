"""Node verdicts: with node agents, where the head of the queue would go and why each
node would or would not take it, one line per node (the stored ``nodes`` gate)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from rngdctl.tui.data import GatesView
from rngdctl.tui.widgets._update import update_if_changed

#: The end of a node's verdict when every gate passes there (daemon/gates/nodes.py verdict).
WOULD_LAUNCH = "→ would launch"


def nodes_text(view: GatesView) -> Text:
    text = Text()  # one line a node, as `show` prints (the CSS cuts, never wraps)
    for i, line in enumerate(view.nodes):
        ok = line.endswith(WOULD_LAUNCH)
        name = line.split(":", 1)[0]
        mark = "◀ " if name == view.node else "  "
        text.append(("\n" if i else "") + mark + ("✓ " if ok else "✗ "),
                    style="green" if ok else "bold red")
        text.append(line, style="" if name == view.node else "dim")
    return text


class NodeVerdicts(Static):
    """Hidden without node agents (no ``nodes`` gate in the head's latest check)."""

    DEFAULT_CSS = "NodeVerdicts { display: none; text-wrap: nowrap; text-overflow: ellipsis; }"

    def show(self, view: GatesView) -> None:
        self.display = bool(view.nodes)
        update_if_changed(self, lambda: nodes_text(view), key=(view.node, view.nodes))
