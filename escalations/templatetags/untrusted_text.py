"""Template filters for untrusted text: the bidirectional controls that could make it read in
another order than it is stored, made visible."""

from django import template

from escalations.selectors import REORDERING_CONTROLS

register = template.Library()

_VISIBLE = {ord(c): f"[U+{ord(c):04X}]" for c in REORDERING_CONTROLS}


@register.filter
def bidi_visible(value: object) -> str:
    """The text with each reordering control written out as "[U+202E]". Plain text: the
    template escapes the result like any other value."""
    return "" if value is None else str(value).translate(_VISIBLE)
