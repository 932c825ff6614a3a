"""Template filters for sentences kept as data (guardian_core/said.py): a gate's reasons,
cautions and notes, worded in the reader's language."""

from django import template

from guardian_core.said import worded as _worded

register = template.Library()


@register.filter
def worded(entry: object) -> str:
    """The entry in the active language; plain text, escaped by the template like any other."""
    return _worded(entry)


@register.filter
def worded_list(entries: list | None, separator: str = "; ") -> str:
    """The entries in the active language, joined by `separator`."""
    return separator.join(_worded(entry) for entry in entries or [])
