"""Template filters for untrusted text: the bidirectional controls that could make it read in
another order than it is stored, made visible."""

from django import template

from guardian_core.untrusted import bidi_visible as _bidi_visible

register = template.Library()


@register.filter
def bidi_visible(value: object) -> str:
    """The text with each bidirectional control (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F,
    U+061C) written out as "[U+202E]". Plain text: the template escapes the result like any
    other value."""
    return _bidi_visible(value)
