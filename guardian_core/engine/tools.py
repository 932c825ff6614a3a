"""Tools, strict validation of a proposed call's arguments, and the keys that identify a call."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import SchemaError, ValidationError

from guardian_core.engine.canonical import canonical_json, sha256_hex
from guardian_core.engine.conditions import RiskClass
from guardian_core.engine.schema_patterns import (
    SCHEMA_FORMAT_CHECKER,
    CheckTooSlow,
    SafeValidator,
    additional_names,
    search,
    within_deadline,
)

if TYPE_CHECKING:  # referencing exports Resolver only from its _core module
    from referencing._core import Resolver

_DRAFT_2020_12 = referencing.jsonschema.DRAFT202012
_DRAFT_2020_12_URIS = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    }
)

# Keywords whose subschemas describe a value at another place in the instance (a field, an
# item): an object schema there describes a whole object, so it is closed on its own.
_AT_A_PLACE_ONE = ("additionalProperties", "unevaluatedProperties", "items", "unevaluatedItems")
_AT_A_PLACE_MANY = ("prefixItems",)
_AT_A_PLACE_BY_NAME = ("properties", "patternProperties")
# Keywords whose subschemas apply to the same value as their parent and may each describe only
# part of an object (allOf: [{a}, {b}]). Closing them one by one would reject the fields the
# other parts declare, so the parent is closed with unevaluatedProperties instead, which sees
# through them. $defs count here because they are reached through $ref, which is one of them.
_IN_PLACE_ONE = ("then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
_IN_PLACE_BY_NAME = ("dependentSchemas", "$defs", "definitions")
_IN_PLACE_KEYWORDS = frozenset(
    {"$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "then", "else", "dependentSchemas"}
)
# not, if, contains and propertyNames are left exactly as written: they decide whether
# something matches, so closing them would change the meaning (closing inside `not` would even
# let more through).
_MATCHERS = ("not", "if", "contains", "propertyNames")
_OBJECT_KEYWORDS = frozenset(
    {
        "properties",
        "required",
        "dependentRequired",
        "dependentSchemas",
        "minProperties",
        "maxProperties",
        "propertyNames",
    }
)
# Any of these means the schema author decided about extra fields; we respect the decision.
_ALLOWS_EXTRA = frozenset({"additionalProperties", "patternProperties", "unevaluatedProperties"})

# What one call's arguments may hold. A schema check costs time per value (about 50 µs each in
# jsonschema, more under anyOf/oneOf) and runs in a web thread for an external step or a
# reviewer's edit: these bound it to well under a second, far above any real tool call.
MAX_ARGUMENT_VALUES = 10_000  # strings, numbers, booleans, nulls, objects and arrays
MAX_ARGUMENT_CHARS = 200_000  # the text of every string and field name together
MAX_ARGUMENT_DEPTH = 32
# And whatever the schema makes of them: a check still running after this long is stopped and
# the call refused (fail closed). Real checks take milliseconds.
SCHEMA_CHECK_SECONDS = 3.0

# Feedback goes back into the model's context: keep every piece of it bounded.
_MAX_NAMES = 20
_MAX_NAME = 60
_MAX_MESSAGE = 300
_UNEXPECTED = re.compile(r"\((.*) (?:was|were) unexpected\)\Z", re.DOTALL)


class StepStopped(Exception):  # noqa: N818 - a stop, not an error of the tool's
    """Raised by a tool's wrapper, before the call starts, when the run may no longer act (it
    was cancelled, or its lease was lost): the call did not start, no later call of the step
    starts, and the turn is not decided (the engine lets it through; its caller records it)."""


@dataclass(frozen=True)
class Tool:
    """A function the actor may call, with the JSON Schema its arguments must fit.

    `func` is called as func(arguments, *, idempotency_key=...) with the validated arguments (a
    dict) and returns a str or a JSON-able value. `risk_class` is the declared class: a floor the
    guardian can raise, never lower. Building a Tool checks the schema: a broken schema is
    caught when the tool is registered, not when a model first calls it.
    """

    name: str
    description: str
    schema: Mapping
    risk_class: RiskClass
    func: Callable[..., object]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a tool needs a non-empty name, got {self.name!r}")
        # Accept "read_only" as well as RiskClass.READ_ONLY (tools are registered from stored
        # text); anything else is a ValueError here rather than a surprise in the gate.
        object.__setattr__(self, "risk_class", RiskClass(self.risk_class))
        if not callable(self.func):
            raise TypeError(f"tool {self.name}: func must be callable")
        _check_schema(self.name, self.schema)


@dataclass(frozen=True)
class CallProblem:
    """One problem with a call: where it is (a "/"-separated path into the arguments, "" for the
    top level) and what is wrong, in words an actor or a reviewer can act on."""

    path: str
    message: str


@dataclass(frozen=True)
class CheckedCall:
    """The outcome of validating one proposed call.

    `arguments` holds the parsed arguments only when the call is valid (ok), else None: nothing
    can execute an invalid call by reading them. `known_tool` is False when no tool has the name.
    """

    tool: str
    arguments: dict | None
    problems: tuple[CallProblem, ...]
    known_tool: bool = field(default=True, kw_only=True)

    @property
    def ok(self) -> bool:
        return not self.problems

    def feedback(self) -> str:
        """One message for the actor listing every problem, so it can fix them all at once."""
        if not self.known_tool:
            return f"{_ends('; '.join(p.message for p in self.problems))}."
        if self.ok:
            return f"Arguments for {self.tool} fit."
        parts = "; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in self.problems)
        return f"Arguments for {self.tool} do not fit: {_ends(parts)}."


def validate_call(
    tools: Mapping[str, Tool],
    name: str,
    raw_arguments: str | object,
    *,
    time_limit: float | None = SCHEMA_CHECK_SECONDS,
) -> CheckedCall:
    """Check a proposed call: the tool exists, and its arguments fit the tool's schema.

    `raw_arguments` is JSON text (as models send it) or an already-decoded value. Never raises
    on anything a model can send: every problem comes back in the CheckedCall, all at once.
    Fields the schema does not declare are rejected unless it explicitly allows them. A schema
    check that runs past `time_limit` seconds is stopped, and the call is refused.
    """
    if not isinstance(name, str) or name not in tools:
        known = ", ".join(sorted(tools)) or "none"
        message = f"There is no tool named {_short(repr(name), _MAX_NAME)}; known tools: {known}"
        return CheckedCall(str(name), None, (CallProblem("", message),), known_tool=False)

    arguments, problem = _decode(raw_arguments)
    if problem is None and not isinstance(arguments, dict):
        problem = f"arguments must be a JSON object, got {_json_type(arguments)}"
    if problem is None:
        problem = _size_problem(arguments)
    if problem is not None:
        return CheckedCall(name, None, (CallProblem("", problem),))

    problems = text_problems(arguments) + _schema_problems(tools[name], arguments, time_limit)
    # A message may quote a field name or a value ("unknown fields: a\x00"): written escaped,
    # so the feedback stored with the turn and shown to a reviewer is always text.
    problems = tuple(CallProblem(_as_text(p.path), _as_text(p.message)) for p in problems)
    return CheckedCall(name, None if problems else arguments, problems)


def _as_text(text: str) -> str:
    return text if is_text(text) else _NOT_TEXT_CHARS.sub(_escaped, text)


_NOT_TEXT_CHARS = re.compile("[\x00\ud800-\udfff]")


def _escaped(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


def is_text(value: str) -> bool:
    """Whether `value` is text every store and wire takes: no NUL, no unpaired surrogate."""
    return "\x00" not in value and not _SURROGATE.search(value)


_SURROGATE = re.compile("[\ud800-\udfff]")
_NOT_TEXT = "holds a NUL character or an unpaired surrogate, which is not text; send plain text"


def text_problems(value: object, path: tuple = ()) -> tuple[CallProblem, ...]:
    """Keys and strings a database or a tool cannot take, wherever they are nested in a
    decoded JSON value."""
    found: list[CallProblem] = []
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if not is_text(item):
                found.append(CallProblem("/".join(map(str, where)), _NOT_TEXT))
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and not is_text(key):
                    found.append(
                        CallProblem("/".join(map(str, where)), f"a field name {_NOT_TEXT}")
                    )
                    continue
                stack.append((child, (*where, key)))
        elif isinstance(item, list):
            stack.extend((child, (*where, i)) for i, child in enumerate(item))
    return tuple(sorted(found, key=lambda p: p.path))


def idempotency_key(
    *, run_id: str | int, turn_index: int, position: int, tool: str, arguments: Mapping
) -> str:
    """The key a write carries so that a retried turn never repeats its side effect.

    The same call (run, turn, position in the step, tool, canonical arguments: key order does
    not matter) always gets the same 64-hex-digit key; any difference gives another key. The
    run id is taken as text, so run 7 and run "7" are the same run.
    """
    for label, value in (("turn_index", turn_index), ("position", position)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{label} must be an int, got {value!r}")
    if isinstance(run_id, bool) or not isinstance(run_id, str | int):
        raise TypeError(f"run_id must be a str or an int, got {run_id!r}")
    # The leading tag keeps these hashes apart from any other hash of a similar list.
    parts = ["guardian-call/1", str(run_id), turn_index, position, tool, dict(arguments)]
    return sha256_hex(parts)


def action_hash(tool: str, arguments: object, idempotency_key: str) -> str:
    """The SHA-256 of one exact action, as 64 hex digits: the tool, the arguments it runs with
    and the idempotency key it runs under. A reviewer's approval stores it, and the worker
    computes it again from the call it is about to run: any difference in any of the three
    gives another hash, so an approval never covers a call that changed after it was given.

    The hashed text is the canonical JSON (canonical.py) of
    {"arguments": ..., "idempotency_key": ..., "tool": ...}: keys sorted at every level (so
    the arguments' key order does not matter), no spaces, non-ASCII characters written as
    themselves (ensure_ascii=False) and encoded as UTF-8, NaN and infinity refused. Anyone can
    recompute it from an exported approval. Raises TypeError or ValueError on a value that is
    not JSON data.
    """
    return sha256_hex({"arguments": arguments, "idempotency_key": idempotency_key, "tool": tool})


def call_signature(tool: str, arguments: object) -> str:
    """The signature of a call for exact-repeat detection: "tool:" then the canonical JSON of
    the arguments. Equal signatures mean the same tool with the same arguments, in any key order.

    JSON text is decoded first, as validate_call does, so '{"b":1,"a":2}' and {"a": 2, "b": 1}
    give one signature. Never raises: text that is not JSON is kept verbatim (it can never equal
    canonical JSON), and a value that is not JSON data falls back to its repr.
    """
    value, problem = _decode(arguments)
    if problem is None:
        return f"{tool}:{canonical_json(value)}"
    if isinstance(arguments, str):
        return f"{tool}:{arguments}"
    return f"{tool}:{arguments!r}"


# ---- building a tool ------------------------------------------------------------------------


# Schemas already found valid, by canonical JSON: a run's tools are wrapped anew every turn
# (to record their calls), and checking a schema costs more than the rest of the turn's
# Python. Only valid schemas are kept, so the cache never hides a problem.
_VALID_SCHEMAS: set[str] = set()


def _check_schema(tool: str, schema: object) -> None:
    if not isinstance(schema, Mapping):
        raise ValueError(f"tool {tool}: the schema must be a JSON object")
    try:
        key = canonical_json(schema)
    except (TypeError, ValueError):
        key = None
    if key is not None and key in _VALID_SCHEMAS:
        return
    _check_schema_content(tool, schema)
    if key is not None and len(_VALID_SCHEMAS) < 4096:
        _VALID_SCHEMAS.add(key)


def _check_schema_content(tool: str, schema: Mapping) -> None:
    plain = _plain(schema)
    if plain.get("type") != "object":
        raise ValueError(f"tool {tool}: the schema's top-level type must be 'object'")
    if "$schema" in plain and plain["$schema"] not in _DRAFT_2020_12_URIS:
        raise ValueError(f"tool {tool}: the schema must be JSON Schema draft 2020-12")
    try:
        # Every pattern is checked here (the meta-schema's `regex` format): one RE2 cannot run
        # is refused now, at the place it is written, not when a model first sends a value.
        SafeValidator.check_schema(plain, format_checker=SCHEMA_FORMAT_CHECKER)
    except SchemaError as exc:
        path = "/".join(str(part) for part in exc.absolute_path)
        reason = f" ({exc.cause})" if exc.cause is not None else ""
        raise ValueError(f"tool {tool}: invalid schema at '{path}': {exc.message}{reason}") from exc
    resolver = referencing.Registry().resolver_with_root(_DRAFT_2020_12.create_resource(plain))
    for ref in _refs(plain, resolver):
        raise ValueError(f"tool {tool}: the schema's $ref {ref!r} cannot be resolved")


def _refs(schema: object, resolver: Resolver) -> Iterable[str]:
    """The $refs in `schema` that do not resolve within it. Nothing is ever fetched."""
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("$id"), str):
        resolver = resolver.in_subresource(_DRAFT_2020_12.create_resource(schema))
    ref = schema.get("$ref")
    if isinstance(ref, str):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            yield ref
    for keyword, value in schema.items():
        if keyword in _AT_A_PLACE_BY_NAME + _IN_PLACE_BY_NAME and isinstance(value, dict):
            for sub in value.values():
                yield from _refs(sub, resolver)
        elif keyword in _AT_A_PLACE_MANY + _IN_PLACE_MANY and isinstance(value, list):
            for sub in value:
                yield from _refs(sub, resolver)
        elif keyword in _AT_A_PLACE_ONE + _IN_PLACE_ONE + _MATCHERS:
            yield from _refs(value, resolver)


def _plain(value: object) -> object:
    """A deep copy made of plain dicts and lists: what jsonschema expects, and ours to change."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


# ---- closing the schema ---------------------------------------------------------------------


def _closed(schema: object, *, at_a_place: bool) -> object:
    """A copy of `schema` where every object schema that says nothing about extra fields
    rejects them: fail closed, at the top level and in every nested object."""
    if not isinstance(schema, dict):
        return schema  # true / false schemas say what they mean
    out = dict(schema)
    for keyword in _AT_A_PLACE_ONE:
        if keyword in out:
            out[keyword] = _closed(out[keyword], at_a_place=True)
    for keyword in _IN_PLACE_ONE:
        if keyword in out:
            out[keyword] = _closed(out[keyword], at_a_place=False)
    for keywords, here in ((_AT_A_PLACE_MANY, True), (_IN_PLACE_MANY, False)):
        for keyword in keywords:
            if isinstance(out.get(keyword), list):
                out[keyword] = [_closed(sub, at_a_place=here) for sub in out[keyword]]
    for keywords, here in ((_AT_A_PLACE_BY_NAME, True), (_IN_PLACE_BY_NAME, False)):
        for keyword in keywords:
            if isinstance(out.get(keyword), dict):
                subs = out[keyword].items()
                out[keyword] = {name: _closed(sub, at_a_place=here) for name, sub in subs}
    if at_a_place and _may_be_an_object(out) and not _ALLOWS_EXTRA & out.keys():
        composed = bool(_IN_PLACE_KEYWORDS & out.keys())
        out["unevaluatedProperties" if composed else "additionalProperties"] = False
    return out


def _may_be_an_object(schema: dict) -> bool:
    # A schema with no type and no object keyword ({} or {"description": ...}) accepts any
    # value: its author said "anything", so it is left open.
    declared = schema.get("type")
    if declared is not None:
        types = declared if isinstance(declared, list) else [declared]
        return "object" in types
    return bool((_OBJECT_KEYWORDS | _IN_PLACE_KEYWORDS) & schema.keys())


# ---- checking the arguments -----------------------------------------------------------------


def _decode(raw: object) -> tuple[object, str | None]:
    """(value, None) for JSON data, else (None, what is wrong). Text is parsed strictly."""
    try:
        if isinstance(raw, str | bytes | bytearray):
            value = json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)
        else:
            # A decoded value must be JSON data: a round trip through JSON gives it back equal.
            # This rejects NaN, tuples, sets, non-text keys and other Python-only values.
            value = json.loads(json.dumps(raw, allow_nan=False))
            if value != raw:
                return None, "arguments are not JSON data"
        # Text that cannot be UTF-8 (a lone surrogate from "\ud800") would break the hashes.
        canonical_json(value).encode("utf-8")
    except UnicodeEncodeError:
        return None, "arguments contain text that is not valid Unicode (a lone surrogate)"
    except (ValueError, TypeError) as exc:
        if isinstance(raw, str | bytes | bytearray):
            return None, _short(f"arguments are not valid JSON: {exc}", _MAX_MESSAGE)
        return None, _short(f"arguments are not JSON data: {exc}", _MAX_MESSAGE)
    except RecursionError:
        return None, "arguments are nested too deeply"
    return value, None


def _size_problem(value: object) -> str | None:
    """What makes `value` too big to check against a schema, or None. Walked without
    recursion, stopping at the first bound crossed."""
    values = chars = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        values += 1
        if depth > MAX_ARGUMENT_DEPTH:
            return f"arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, dict):
            chars += sum(len(key) for key in item)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        if values > MAX_ARGUMENT_VALUES:
            return f"arguments hold more than {MAX_ARGUMENT_VALUES} values; send fewer"
        if chars > MAX_ARGUMENT_CHARS:
            return f"arguments hold more than {MAX_ARGUMENT_CHARS} characters of text; send less"
    return None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed in JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {_short(text, _MAX_NAME)} is out of range")
    return value


def _schema_problems(
    tool: Tool, arguments: dict, time_limit: float | None
) -> tuple[CallProblem, ...]:
    # Closed on every call from the tool's schema as it is now: no cache to go stale, and the
    # tool's own schema is never touched (_plain copies it first).
    schema = _closed(_plain(tool.schema), at_a_place=True)
    # An empty registry: a $ref that does not resolve inside the schema is never fetched.
    validator = SafeValidator(schema, registry=referencing.Registry())
    try:
        with within_deadline(time_limit):
            errors = list(validator.iter_errors(arguments))
    except CheckTooSlow:
        message = (
            f"checking the arguments against the schema of {tool.name} took longer than "
            f"{time_limit:g} s, so the call is refused; send simpler arguments"
        )
        return (CallProblem("", message),)
    except referencing.exceptions.Unresolvable as exc:
        return (CallProblem("", _short(f"the schema of {tool.name} cannot be used: {exc}", 200)),)
    except RecursionError:
        return (CallProblem("", "arguments are nested too deeply"),)
    resolver = referencing.Registry().resolver_with_root(_DRAFT_2020_12.create_resource(schema))
    return _Collector(resolver).problems(errors)


class _Collector:
    """Turns jsonschema's errors into CallProblems: missing and unknown fields grouped per
    object the way a person would say them, everything else as jsonschema words it."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        self.missing: dict[tuple, set[str]] = {}
        self.unknown: dict[tuple, set[str]] = {}
        self.unfit: dict[tuple, set[str]] = {}
        self.other: set[tuple[tuple, str]] = set()

    def problems(self, errors: list[ValidationError]) -> tuple[CallProblem, ...]:
        for error in errors:
            self.add(error)
        found: list[tuple[tuple, int, str]] = []
        for rank, label, groups in (
            (0, "missing required fields", self.missing),
            (1, "unknown fields", self.unknown),
        ):
            found += [(path, rank, f"{label}: {_names(names)}") for path, names in groups.items()]
        found += [(path, 2, message) for path, message in self.other]
        # Fields the schema declares, rejected only because the alternative declaring them did
        # not fit: that alternative's own problem (at or below the same place) explains it.
        for path, names in self.unfit.items():
            if not any(where[: len(path)] == path for where, _, _ in found):
                found.append((path, 2, f"fields no matching alternative allows: {_names(names)}"))
        found.sort(key=lambda item: (_sort_key(item[0]), item[1], item[2]))
        return tuple(CallProblem(_path(path), message) for path, _, message in found)

    def add(self, error: ValidationError) -> None:
        path = tuple(error.absolute_path)
        keyword, value, instance = error.validator, error.validator_value, error.instance
        if keyword == "required" and isinstance(instance, dict):
            missing = {name for name in value if name not in instance}
            self.missing.setdefault(path, set()).update(missing)
        elif keyword == "additionalProperties" and value is False:
            extra = _additional(instance, error.schema)
            self.unknown.setdefault(path, set()).update(extra)
        elif keyword == "unevaluatedProperties" and value is False:
            self.add_unevaluated(error, path)
        elif keyword in ("anyOf", "oneOf") and error.context:
            self.add_alternatives(error, path)
        else:
            self.other.add((path, _short(error.message, _MAX_MESSAGE)))

    def add_unevaluated(self, error: ValidationError, path: tuple) -> None:
        names = _unexpected(error.message)
        if names is None:
            self.other.add((path, _short(error.message, _MAX_MESSAGE)))
            return
        declared = _declared(error.schema, self.resolver, names, set())
        if names - declared:
            self.unknown.setdefault(path, set()).update(names - declared)
        if names & declared:
            self.unfit.setdefault(path, set()).update(names & declared)

    def add_alternatives(self, error: ValidationError, path: tuple) -> None:
        # When exactly one alternative has the right shape (a nullable object: the null branch
        # fails on type), its own problems say what to fix; otherwise say none fit.
        by_branch: dict[int, list[ValidationError]] = {}
        for sub in error.context:
            by_branch.setdefault(sub.relative_schema_path[0], []).append(sub)
        shaped = [
            subs
            for subs in by_branch.values()
            if not any(s.validator == "type" and tuple(s.absolute_path) == path for s in subs)
        ]
        if len(shaped) == 1 and len(by_branch) == len(error.validator_value):
            for sub in shaped[0]:
                self.add(sub)
        else:
            self.other.add((path, _short(error.message, _MAX_MESSAGE)))


def _additional(instance: object, schema: Mapping) -> set[str]:
    """The fields of `instance` that `schema` neither names nor matches by pattern."""
    if not isinstance(instance, dict):
        return set()
    return set(additional_names(instance, schema))


def _unexpected(message: str) -> set[str] | None:
    # jsonschema lists unevaluated fields only in its message, as reprs: read them back.
    match = _UNEXPECTED.search(message)
    if match is None:
        return None
    try:
        names = ast.literal_eval(f"[{match.group(1)}]")
    except (ValueError, SyntaxError):
        return None
    if not all(isinstance(name, str) for name in names):
        return None
    return set(names)


def _declared(schema: object, resolver: Resolver, names: set, seen: set) -> set:
    """Which of `names` the schema declares for this object, through allOf, anyOf, oneOf,
    if/then/else, dependentSchemas and $ref: anywhere a property of this object can come from."""
    if not isinstance(schema, dict) or id(schema) in seen:
        return set()
    seen.add(id(schema))
    if isinstance(schema.get("$id"), str):
        resolver = resolver.in_subresource(_DRAFT_2020_12.create_resource(schema))
    if any(
        schema.get(keyword, False) is not False for keyword in _ALLOWS_EXTRA - {"patternProperties"}
    ):
        return set(names)
    declared = names & set(schema.get("properties", {}))
    declared |= {n for n in names for p in schema.get("patternProperties", {}) if search(p, n)}
    subs = [schema.get(keyword) for keyword in ("if", "then", "else")]
    subs += [sub for keyword in _IN_PLACE_MANY for sub in schema.get(keyword, [])]
    subs += list(schema.get("dependentSchemas", {}).values())
    for sub in subs:
        declared |= _declared(sub, resolver, names, seen)
    for keyword in ("$ref", "$dynamicRef"):
        if isinstance(schema.get(keyword), str):
            try:
                resolved = resolver.lookup(schema[keyword])
            except referencing.exceptions.Unresolvable:
                continue
            declared |= _declared(resolved.contents, resolved.resolver, names, seen)
    return declared


# ---- words ----------------------------------------------------------------------------------


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"


def _names(names: set[str]) -> str:
    ordered = sorted(names)
    shown = ", ".join(_short(name, _MAX_NAME) for name in ordered[:_MAX_NAMES])
    if len(ordered) > _MAX_NAMES:
        shown += f" and {len(ordered) - _MAX_NAMES} more"
    return shown


def _path(parts: tuple) -> str:
    # JSON Pointer escaping, so a field named "a/b" is not read as a nested path.
    return "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def _sort_key(parts: tuple) -> tuple:
    # Indexes sort as numbers (items/2 before items/10), and never compare with names.
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, str(part)) for part in parts)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ends(text: str) -> str:
    return text.rstrip(". ")
