"""Updating a Static, or a panel's border title, only when what it shows changed, so
that an unchanged panel is not re-rendered on every refresh."""

from __future__ import annotations

from textual.widgets import Static

_UNSET = object()


def update_if_changed(static: Static, renderable, key=_UNSET) -> None:
    """Show ``renderable`` unless ``key`` (default: the renderable itself) is what it shows.
    ``renderable`` may be a function that makes it, with a ``key``: it is called only when
    the key changed, so an unchanged panel costs the key's comparison alone."""
    key = renderable if key is _UNSET else key
    if getattr(static, "_rngdctl_shown", _UNSET) == key:
        return
    static._rngdctl_shown = key
    static.update(renderable() if callable(renderable) else renderable)


def set_if_changed(widget, attr: str, value) -> None:
    """``setattr(widget, attr, value)`` unless ``value`` is what was set last: setting a
    border title or subtitle repaints the panel even when it is the same."""
    key = f"_rngdctl_{attr}"
    if getattr(widget, key, _UNSET) == value:
        return
    setattr(widget, key, value)
    setattr(widget, attr, value)
