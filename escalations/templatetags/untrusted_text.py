"""Template filters for untrusted text: the bidirectional controls that could make it read in
another order than it is stored, made visible."""

from django import template
from django.utils.html import format_html

from guardian_core.untrusted import bidi_visible as _bidi_visible

register = template.Library()


@register.filter
def bidi_visible(value: object) -> str:
    """The text with each bidirectional control (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F,
    U+061C) written out as "[U+202E]". Plain text: the template escapes the result like any
    other value."""
    return _bidi_visible(value)


@register.filter
def isolated(value: object) -> str:
    """The text as `bidi_visible` writes it, escaped, in a <bdi>: someone else's words inside
    one of ours (a token's name in "Revoke token “…”?") keep their own direction and cannot
    reorder the sentence around them, in any language."""
    return format_html("<bdi>{}</bdi>", _bidi_visible(value))
