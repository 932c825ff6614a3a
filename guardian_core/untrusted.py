"""Untrusted and user-written text made safe to read: the bidirectional controls that would make
it read in another order than it is stored, written out as their code points ("[U+202E]").

A floor module (no app imported), so models' __str__, the admin and every app's templates say
it the same way; the `bidi_visible` template filter (escalations/templatetags/untrusted_text.py)
is this function.
"""

# Embeddings, overrides and isolates: inside a field they reorder the field itself ("gnp.exe"
# after U+202E reads "exe.png"), which <bdi> and dir="auto" cannot prevent.
REORDERING_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# The marks (left-to-right, right-to-left, Arabic letter mark): invisible, they move the
# neutral characters around them (a "-" or a "." beside a number), so they are written out too.
DIRECTION_MARKS = "\u200e\u200f\u061c"
BIDI_CONTROLS = REORDERING_CONTROLS + DIRECTION_MARKS

_VISIBLE = {ord(c): f"[U+{ord(c):04X}]" for c in BIDI_CONTROLS}


def bidi_visible(value: object) -> str:
    """The text with each bidirectional control written out as "[U+202E]" ("" for None).
    Plain text: a template escapes the result like any other value."""
    return "" if value is None else str(value).translate(_VISIBLE)


def has_bidi_controls(text: object) -> bool:
    """Whether `text` (or any string inside a JSON value) holds a bidirectional control."""
    if isinstance(text, str):
        return any(c in text for c in BIDI_CONTROLS)
    if isinstance(text, dict):
        return any(has_bidi_controls(k) or has_bidi_controls(v) for k, v in text.items())
    if isinstance(text, list | tuple):
        return any(has_bidi_controls(item) for item in text)
    return False
