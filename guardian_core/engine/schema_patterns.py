"""The JSON Schema validator tools are checked with: Draft 2020-12, its regular expressions
(`pattern`, `patternProperties`, the `regex` format) run by RE2 instead of Python's re.

A tool's schema may come from an integrator (an external run's inline tools, a webhook tool),
and its patterns are matched against what a model sends. Python's re backtracks: "^(a+)+$"
against 26 "a"s and a "!" took 5.8 s inside a web thread, doubling with each character. RE2
runs in time linear in the text whatever the pattern, and refuses what it cannot run that way
(backreferences, lookaround), so such a schema is refused when the tool is built, naming the
place of the pattern. RE2's syntax is also closer to the ECMA-262 dialect JSON Schema names
than Python's ($ ends the text, \\d is an ASCII digit, \\p{L} is a letter).

jsonschema calls re.search directly in four keywords; `SafeValidator` replaces those four
(jsonschema.validators.extend, the library's way to change a keyword), and uniqueItems, which
jsonschema checks in quadratic time; every keyword also looks at a deadline (within_deadline),
so no schema holds a thread however it is written; and
`SCHEMA_FORMAT_CHECKER` replaces the `regex` format that `check_schema` applies to every
pattern in a schema. Plain library code: no Django.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import re2
from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError

# A pattern's compiled program is bounded too: RE2 refuses one that needs more (a{1000}{1000}).
_MAX_PROGRAM_BYTES = 1 << 20
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the refusal is reported to the caller, not printed to stderr
_OPTIONS.max_mem = _MAX_PROGRAM_BYTES


class PatternError(ValueError):
    """A pattern RE2 cannot run: the reason, in RE2's words."""


@functools.lru_cache(maxsize=4096)
def compiled(pattern: str) -> re2._Regexp:
    """`pattern` compiled by RE2, cached (a run's tools are checked again every step); raises
    PatternError naming what RE2 refused."""
    if not isinstance(pattern, str):
        raise PatternError("a pattern must be text")
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "cannot be compiled"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(f"RE2 cannot run this pattern: {reason}") from None
    except UnicodeEncodeError:
        raise PatternError("the pattern is not valid Unicode text") from None


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches anywhere in `text` (JSON Schema's `pattern` is unanchored).

    Text that cannot be UTF-8 (a lone surrogate) matches nothing: validate_call names such
    text on its own, and it must never make the check itself fail."""
    try:
        return compiled(pattern).search(text) is not None
    except UnicodeEncodeError:
        return False


# ---- the four keywords that match patterns ---------------------------------------------------
# Each keeps jsonschema 4's behaviour and messages (jsonschema/_keywords.py), with RE2.


def _pattern(validator, pattern, instance, schema) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if search(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def _additional_properties(validator, additional, instance, schema) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = set(additional_names(instance, schema))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            names = sorted(extras, key=str)
            verb = "was" if len(names) == 1 else "were"
            listed = ", ".join(repr(name) for name in names)
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {verb} unexpected)"
            )


def _unevaluated_properties(validator, unevaluated, instance, schema) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_names(validator, instance, schema)
    rejected = []
    for name in instance:
        if name in evaluated:
            continue
        for _ in validator.descend(instance[name], unevaluated, path=name, schema_path=name):
            rejected.append(name)
            break
    if rejected and unevaluated is False:
        names = sorted(rejected, key=str)
        verb = "was" if len(names) == 1 else "were"
        listed = ", ".join(repr(name) for name in names)
        yield ValidationError(
            f"Unevaluated properties are not allowed ({listed} {verb} unexpected)"
        )


def additional_names(instance: Mapping, schema: Mapping) -> Iterator[str]:
    """The names of `instance` that `schema` neither lists in `properties` nor matches by a
    `patternProperties` pattern."""
    named = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    for name in instance:
        if name not in named and not any(search(pattern, name) for pattern in patterns):
            yield name


def _evaluated_names(validator, instance: Mapping, schema: object) -> set[str]:
    """The names of `instance` that `schema` evaluates, through $ref, $dynamicRef, allOf,
    anyOf, oneOf, if/then/else and dependentSchemas: jsonschema 4's
    _utils.find_evaluated_property_keys_by_schema, with RE2 for patternProperties."""
    if validator.is_type(schema, "boolean") or not isinstance(schema, Mapping):
        return set()
    evaluated: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        reference = schema.get(keyword)
        if reference is not None:
            resolved = validator._resolver.lookup(reference)
            inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            evaluated |= _evaluated_names(inner, instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        evaluated |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            evaluated |= {
                name
                for name, value in instance.items()
                if next(validator.descend(value, subschema), None) is None
            }
    for pattern in schema.get("patternProperties", {}):
        evaluated |= {name for name in instance if search(pattern, name)}
    for name, subschema in schema.get("dependentSchemas", {}).items():
        if name in instance:
            evaluated |= _evaluated_names(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if next(validator.descend(instance, subschema), None) is None:
                evaluated |= _evaluated_names(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            evaluated |= _evaluated_names(validator, instance, schema["if"])
            if "then" in schema:
                evaluated |= _evaluated_names(validator, instance, schema["then"])
        elif "else" in schema:
            evaluated |= _evaluated_names(validator, instance, schema["else"])
    return evaluated


def _unique_items(validator, unique, instance, schema) -> Iterator[ValidationError]:
    # jsonschema compares unsortable items (objects) pairwise: 1 000 objects took 4 s.
    # Hashing each item's JSON value is linear, with JSON Schema's equality: 1 and 1.0 are
    # equal, true and 1 are not, an object's key order does not count.
    if not unique or not validator.is_type(instance, "array"):
        return
    seen = set()
    for item in instance:
        key = _json_value_key(item)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def _json_value_key(value: object) -> object:
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, int | float):
        return ("number", value)  # 1 == 1.0 and hash(1) == hash(1.0)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list | tuple):
        return ("array", tuple(_json_value_key(item) for item in value))
    if isinstance(value, Mapping):
        return ("object", frozenset((k, _json_value_key(v)) for k, v in value.items()))
    return ("other", repr(value))


# ---- a deadline on the whole check ---------------------------------------------------------
# Bounded arguments (tools.MAX_ARGUMENT_*) are not enough: a schema can make the check itself
# exponential (anyOf over a recursive $ref re-checks each level twice; 16 levels took 30 s).
# Every keyword looks at the deadline before it runs, so a check stops soon after it passes.


class CheckTooSlow(Exception):
    """The schema check ran past its deadline (within_deadline)."""


_DEADLINE: ContextVar[float | None] = ContextVar("schema_check_deadline", default=None)


@contextmanager
def within_deadline(seconds: float | None) -> Iterator[None]:
    """Within this block a SafeValidator check raises CheckTooSlow once `seconds` have passed
    (a monotonic clock: a guard on the thread's time, not an input to any decision)."""
    token = _DEADLINE.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _on_the_clock(keyword):
    def checked(validator, value, instance, schema):
        deadline = _DEADLINE.get()
        if deadline is not None and time.monotonic() > deadline:
            raise CheckTooSlow
        return keyword(validator, value, instance, schema)

    return checked


_KEYWORDS = {
    **Draft202012Validator.VALIDATORS,
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "unevaluatedProperties": _unevaluated_properties,
    "uniqueItems": _unique_items,
}
SafeValidator = validators.extend(
    Draft202012Validator,
    validators={name: _on_the_clock(keyword) for name, keyword in _KEYWORDS.items()},
)


def _is_regex(instance: object) -> bool:
    if isinstance(instance, str):
        compiled(instance)
    return True


# Draft 2020-12's format checks, with `regex` (which the meta-schema puts on every `pattern`
# and every `patternProperties` name) meaning "RE2 can run it".
SCHEMA_FORMAT_CHECKER = FormatChecker()
SCHEMA_FORMAT_CHECKER.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
SCHEMA_FORMAT_CHECKER.checks("regex", raises=PatternError)(_is_regex)
