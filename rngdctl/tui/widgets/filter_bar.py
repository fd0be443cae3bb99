"""The `/` filter: narrows the queue, history and holder tables as you type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input


class FilterBar(Input):
    """Enter keeps the filter and closes the bar; Escape clears it."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "clear_filter", "Clear filter")]

    @dataclass
    class Closed(Message):
        """The bar closed; ``text`` is the filter now in force ('' for none)."""

        text: str

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.post_message(self.Closed(self.value.strip()))

    def action_clear_filter(self) -> None:
        self.value = ""
        self.post_message(self.Closed(""))
