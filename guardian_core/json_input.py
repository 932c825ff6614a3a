"""JSON from a client or a person, checked once for what no database column takes: the API's
parser and the reviewer's decision form both read JSON through here.

PostgreSQL refuses a NUL character in text and in jsonb (\\u0000), UTF-8 cannot encode a lone
surrogate, and jsonb has no Infinity: any of them in a value, a field name, a tool name, a goal
or a reason was a 500 at the insert. Python's json reads "1e999" (or a 5 000-digit decimal) as
infinity, refuses an integer of more than 4 300 digits with a bare ValueError, and recurses
once per level of nesting (a RecursionError at a few thousand). Each of these is named here,
at its place, in words a client or a reviewer can act on.
"""

import json
import math
import re
import sys
from collections.abc import Iterator

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

NUL = gettext_lazy("holds a NUL character (\\u0000), which no database column takes")
SURROGATE = gettext_lazy("holds a lone surrogate (\\ud800-\\udfff), which is not text")
NOT_FINITE = gettext_lazy("is a number out of range")
_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")
# The interpreter's own bound on the digits of an integer read from text (PEP 651's limit).
MAX_INT_DIGITS = sys.get_int_max_str_digits() or 4300
MAX_PROBLEMS = 20  # enough to fix the input; the rest would repeat itself


class JsonInputError(ValueError):
    """JSON text that cannot be read, with what is wrong in words a person can act on."""


def loads(text: str, *, max_depth: int) -> object:
    """Decode JSON text from a client or a person. Raises JsonInputError for text that is not
    JSON, nesting deeper than `max_depth`, an integer of more digits than Python reads, a
    number out of range (1e999) and NaN or Infinity; never RecursionError or a bare ValueError.
    The value may still hold text no column takes: see problems()."""
    if depth_exceeds(text, max_depth):
        raise JsonInputError(_("nested deeper than %(limit)s levels") % {"limit": max_depth})
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except JsonInputError:
        raise
    except json.JSONDecodeError as error:
        raise JsonInputError(
            _("not valid JSON: %(error)s (line %(line)s, column %(column)s)")
            % {"error": error.msg, "line": error.lineno, "column": error.colno}
        ) from None
    except RecursionError:  # depth_exceeds makes this unreachable; an answer all the same
        raise JsonInputError(
            _("nested deeper than %(limit)s levels") % {"limit": max_depth}
        ) from None
    except ValueError as error:
        raise JsonInputError(_("not valid JSON: %(error)s") % {"error": error}) from None


def depth_exceeds(text: str, limit: int) -> bool:
    """Whether JSON text nests arrays and objects deeper than `limit`, found without parsing
    (brackets inside strings do not count)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def problems(value: object, where: str = "") -> list[str]:
    """ "place: what is wrong" for every text a column cannot take (NUL, lone surrogate) and
    every number that is not finite, anywhere in a decoded JSON value, field names included.
    Places read as the API's errors do (`calls[0].arguments.order_id`); [] when all is well."""
    found = []
    for place, problem in _walk(value, where):
        found.append(f"{place}: {problem}" if place else problem)
        if len(found) >= MAX_PROBLEMS:
            break
    return found


def text_problem(text: str) -> str | None:
    """What makes `text` unstorable, or None."""
    if "\x00" in text:
        return NUL
    if _NOT_TEXT.search(text):
        return SURROGATE
    return None


def field_name_problem(problem: str) -> str:
    """What is wrong with a field name, from what text_problem() said of it."""
    # Translators: problem is e.g. "holds a NUL character (\u0000), which no database column
    # takes"; the whole reads "a field name holds a NUL character…".
    return _("a field name %(problem)s") % {"problem": problem}


def shown(text: str) -> str:
    """`text` with every NUL and lone surrogate written as its \\u escape: safe to store and to
    show, and still saying what was sent."""
    return _NOT_TEXT.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _walk(value: object, where: str) -> Iterator[tuple[str, str]]:
    stack = [(value, where)]
    while stack:
        item, place = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                yield place, problem
        elif isinstance(item, float):
            if not math.isfinite(item):
                yield place, NOT_FINITE
        elif isinstance(item, dict):
            children = []
            for key, child in item.items():
                problem = text_problem(key) if isinstance(key, str) else None
                if problem:
                    yield place, field_name_problem(problem)
                    continue
                children.append((child, f"{place}.{_key(key)}" if place else _key(key)))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(child, f"{place}[{i}]") for i, child in enumerate(item)]))


def _key(key: object) -> str:
    text = str(key)
    plain = text.isascii() and text.isprintable() and len(text) <= 60 and "." not in text
    return text if plain else ascii(text)[:60]


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonInputError(
            _("a number with more than %(count)s digits") % {"count": MAX_INT_DIGITS}
        )
    return int(text)


def _float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        shown_number = f"{text[:20]}{'…' if len(text) > 20 else ''}"
        raise JsonInputError(_("a number out of range: %(number)s") % {"number": shown_number})
    return number


def _constant(name: str) -> float:
    raise JsonInputError(_("%(name)s is not a JSON number") % {"name": name})
