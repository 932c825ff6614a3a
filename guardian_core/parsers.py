"""The API's one request parser: JSON, refused cleanly when nested too deeply or when it holds
what no database column takes.

Python's json module recurses once per level and raises RecursionError (not ValueError) on a
document nested a few thousand levels deep, which DRF's JSONParser lets through as a 500.
The nesting is measured first, without recursion, and a document too deep is a 400 naming
the top-level field it is in. A NUL character, a lone surrogate or a number out of range
(1e999) anywhere in the document, field names included, is a 400 naming its place
(guardian_core.json_input): one check for every endpoint, before any of them sees the data.
"""

import re

from django.conf import settings
from django.utils.translation import gettext as _
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.utils import json

from guardian_core import json_input

# Deeper than any request the API takes; the fields' own checks (runs/validation.py) are
# stricter. Far below the interpreter's recursion limit.
MAX_REQUEST_DEPTH = 64

# JSON strings (skipped whole, escapes included), a quote that opens a string never closed,
# and the structural characters between them. Possessive: no backtracking inside a string.
_TOKENS = re.compile(r'"(?:[^"\\]++|\\.)*+"|"|[\[\]{}:]', re.DOTALL)


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            text = stream.read().decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(_("JSON parse error - %(error)s") % {"error": exc}) from None
        too_deep_in = _too_deep_field(text, MAX_REQUEST_DEPTH)
        if too_deep_in is not None:
            too_deep = _("nested deeper than %(limit)s levels") % {"limit": MAX_REQUEST_DEPTH}
            raise ValidationError({too_deep_in: [too_deep]})
        parse_constant = json.strict_constant if self.strict else None
        try:
            data = json.loads(text, parse_constant=parse_constant)
        except ValueError as exc:
            raise ParseError(_("JSON parse error - %(error)s") % {"error": exc}) from None
        except RecursionError:  # the scan above makes this unreachable; a 400 all the same
            raise ParseError(_("JSON parse error - nested too deeply")) from None
        unstorable = _unstorable_by_field(data)
        if unstorable:
            raise ValidationError(unstorable)
        return data


def _unstorable_by_field(data: object) -> dict[str, list[str]]:
    """Every place in the body holding text or a number no column takes, under its top-level
    field as the API's errors are ("calls": ["calls[0].arguments.order_id: holds a NUL…"])."""
    if not isinstance(data, dict):
        found = json_input.problems(data)
        return {"detail": found} if found else {}
    grouped: dict[str, list[str]] = {}
    for key, value in data.items():
        problem = json_input.text_problem(key)
        if problem:
            grouped.setdefault("detail", []).append(json_input.field_name_problem(problem))
            continue
        found = json_input.problems(value, key)
        if found:
            grouped[key] = found
    return grouped


def _too_deep_field(text: str, limit: int) -> str | None:
    """The top-level key under which `text` nests deeper than `limit` ("detail" if the
    document itself is too deep outside any key), or None when it is not too deep."""
    depth = 0
    last_string = None
    key = "detail"
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return key
        elif token == '"':
            return None  # an unclosed string: not JSON, json.loads says so; stop scanning here
        elif token in "]}":
            depth -= 1
        elif token == ":":
            if depth == 1 and last_string is not None:
                key = _key_name(last_string)
        else:
            last_string = token
    return None


def _key_name(literal: str) -> str:
    inner = literal[1:-1]
    # Only a plain name is echoed back; anything else is reported as the request's.
    return inner if inner.isidentifier() and inner.isascii() and len(inner) <= 60 else "detail"
