"""The submit form: the same options and validation as `rngdctl submit`."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

from daemon.errors import BadInput

#: (option, label, kind) in form order; kind parses the text before validation.
FIELDS = [
    ("cards", "cards", int),
    ("resident", "resident layers / card", int),
    ("steps", "steps", int),
    ("model", "model", str),
    ("data", "data", str),
    ("seq_len", "seq len", int),
    ("accum", "accum", int),
    ("lr", "lr", float),
    ("seed", "seed", int),
    ("backend", "backend", str),
    ("name", "name", str),
]
KIND_WORDS = {int: "a whole number", float: "a number"}


def parse_options(texts: dict[str, str], baseline: bool) -> dict:
    """Typed options from the form's texts (blank: the default); BadInput on a bad number."""
    options: dict = {"baseline": baseline}
    for key, _label, kind in FIELDS:
        text = texts.get(key, "").strip()
        if not text:
            continue
        try:
            options[key] = kind(text)
        except ValueError:
            raise BadInput(f"--{key.replace('_', '-')} must be {KIND_WORDS[kind]}, "
                           f"got {text!r}") from None
    return options


class SubmitScreen(ModalScreen[dict | None]):
    """Dismisses with a validated run config, or None when cancelled."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "dismiss(None)", "Close")]

    def __init__(self, host=None):
        super().__init__()
        self.host = host  # daemon.run.host_fit.Host: submit's checks of what it can run

    def compose(self) -> ComposeResult:
        from daemon.run.spec import DEFAULTS

        with Vertical(id="submit-box", classes="dialog"):
            yield Static("submit a run", classes="dialog-title")
            with Grid(id="submit-grid"):
                for key, label, _kind in FIELDS:
                    yield Label(label)
                    default = DEFAULTS.get(key)
                    yield Input(placeholder="required" if key == "cards"
                                else ("" if default is None else str(default)),
                                id=f"field-{key}")
            yield Checkbox("baseline pass first (all-offload, for the step model)",
                           id="field-baseline")
            yield Static(id="submit-error")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Submit", id="submit", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#field-cards", Input).focus()

    def texts(self) -> dict[str, str]:
        return {key: self.query_one(f"#field-{key}", Input).value for key, _, _ in FIELDS}

    @on(Button.Pressed, "#cancel")
    def close_form(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#submit")
    @on(Input.Submitted)
    def submit_form(self) -> None:
        from daemon.run.spec import validate

        error = self.query_one("#submit-error", Static)
        try:
            options = parse_options(self.texts(),
                                    self.query_one("#field-baseline", Checkbox).value)
            config = validate(options, host=self.host)
        except BadInput as exc:
            error.update(f"✗ {exc}")
            error.add_class("shown")
            return
        self.dismiss(config)
