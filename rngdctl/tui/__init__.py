"""The Textual monitor. Import ``rngdctl.tui.app`` only where the TUI runs:
it imports textual, which the light commands must not."""
