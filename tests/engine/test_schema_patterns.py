"""Regular expressions in a tool's JSON Schema (`pattern`, `patternProperties`) come from
integrators and are matched against what a model sends: they run on RE2, in time linear in
the text, and a pattern RE2 cannot run is refused when the tool is built, naming where."""

import functools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardian_core.engine.conditions import RiskClass
from guardian_core.engine.schema_patterns import search
from guardian_core.engine.tools import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_VALUES,
    Tool,
    validate_call,
)

# Backtracking engines (Python's re, JavaScript's) take time doubling with every "a" on this
# pattern when the text does not match: 26 characters took 5.8 s inside a web thread.
EVIL = "^(a+)+$"
SLOW_TEXT = "a" * 27 + "!"  # ~12 s on a backtracking engine; microseconds on RE2


def _never_called(arguments, *, idempotency_key):
    raise AssertionError("validation must never execute the tool")


def tool(schema: dict) -> Tool:
    return Tool("t", "a tool of an integrator's", schema, RiskClass.READ_ONLY, _never_called)


# Whether a check is linear is told by what it answers, not by a stopwatch: a backtracking
# engine or a pairwise comparison runs past the check's time limit (SCHEMA_CHECK_SECONDS) on
# these inputs, and the call is then refused with "took longer than" instead of being checked.
TIMED_OUT = "took longer than"


def check(schema: dict, arguments: dict):
    return validate_call({"t": tool(schema)}, "t", arguments)


def timed_out(checked) -> bool:
    return any(TIMED_OUT in p.message for p in checked.problems)


def test_a_catastrophic_pattern_on_a_value_answers_at_once():
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": EVIL}}}
    checked = check(schema, {"code": SLOW_TEXT})
    assert not timed_out(checked)
    assert not checked.ok
    assert checked.problems[0].path == "code"
    assert "does not match" in checked.problems[0].message
    # A text that fits still fits.
    assert check(schema, {"code": "aaaa"}).ok


def test_a_catastrophic_pattern_on_field_names_answers_at_once():
    schema = {
        "type": "object",
        "patternProperties": {EVIL: {"type": "integer"}},
        "additionalProperties": False,
    }
    checked = check(schema, {SLOW_TEXT: 1, "aaa": 2})
    assert [p.message for p in checked.problems] == [f"unknown fields: {SLOW_TEXT}"]


def test_a_catastrophic_pattern_seen_through_all_of_answers_at_once():
    # The closed schema's unevaluatedProperties looks through allOf for the fields it names.
    schema = {
        "type": "object",
        "allOf": [{"patternProperties": {EVIL: {"type": "integer"}}}],
    }
    checked = check(schema, {SLOW_TEXT: 1, "aaa": 2})
    assert [p.message for p in checked.problems] == [f"unknown fields: {SLOW_TEXT}"]
    assert check(schema, {"aaa": 2}).ok
    assert not check(schema, {"aaa": "two"}).ok


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        (
            {"type": "object", "properties": {"code": {"type": "string", "pattern": r"(a)\1"}}},
            "properties/code/pattern",
        ),
        (
            {"type": "object", "properties": {"code": {"pattern": "(?=a)b"}}},
            "properties/code/pattern",
        ),
        ({"type": "object", "patternProperties": {"(?<!x)y": {}}}, "patternProperties"),
        (
            {"type": "object", "$defs": {"c": {"pattern": "a{2000}"}}},
            "$defs/c/pattern",
        ),
    ],
    ids=["backreference", "lookahead", "lookbehind-in-a-field-name", "repeat-too-large"],
)
def test_a_pattern_re2_cannot_run_is_refused_when_the_tool_is_built_naming_where(schema, where):
    with pytest.raises(ValueError, match="invalid schema") as refused:
        tool(schema)
    message = str(refused.value)
    assert f"'{where}'" in message
    assert "RE2" in message


def test_patterns_follow_json_schema_s_regular_expressions_not_python_s():
    # ECMA-262, as JSON Schema says: $ ends the text (Python's also matches before a final
    # newline), \d is an ASCII digit, and \p{L} is a letter (Python's re refuses \p).
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": r"^\d+$"},
            "name": {"type": "string", "pattern": r"^\p{L}+$"},
        },
    }
    assert check(schema, {"code": "123", "name": "Zoë"}).ok
    assert not check(schema, {"code": "123\n", "name": "Zoë"}).ok
    assert not check(schema, {"code": "١٢٣", "name": "Zoë"}).ok
    assert not check(schema, {"code": "1", "name": "Zoë1"}).ok


def test_text_that_is_not_unicode_matches_no_pattern_and_never_breaks_the_check():
    # validate_call names such text before any pattern sees it; RE2 cannot take it at all.
    assert not search("^a", "a\ud800")
    assert not search("x", "x\ud800")


@settings(max_examples=60, deadline=2000)
@given(
    pattern=st.sampled_from([EVIL, "^(a|aa)+$", "^(a|a?)+$", "(x+x+)+y", "^([a-z]+)*[0-9]$"]),
    text=st.text(alphabet="ax!0", min_size=0, max_size=5000),
)
def test_any_text_on_any_nested_quantifier_is_checked_in_linear_time(pattern, text):
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": pattern}}}
    assert not timed_out(check(schema, {"v": text}))


def test_unique_items_are_checked_in_linear_time_with_json_equality():
    schema = {"type": "object", "properties": {"v": {"type": "array", "uniqueItems": True}}}
    distinct = [{"a": i, "b": [i, True]} for i in range(1500)]
    # jsonschema's pairwise comparison took 4 s for 1 000 objects: past the time limit here.
    assert check(schema, {"v": distinct}).ok
    assert not check(schema, {"v": [*distinct, {"b": [1499, True], "a": 1499}]}).ok
    assert not check(schema, {"v": [1, 1.0]}).ok
    assert check(schema, {"v": [1, True, 0, False, None, "1", [1], {"1": 1}]}).ok


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"v": list(range(MAX_ARGUMENT_VALUES))}, "values"),
        ({"v": "x" * (MAX_ARGUMENT_CHARS + 1)}, "characters"),
        ({"v": functools.reduce(lambda inner, _: [inner], range(40), [])}, "nested deeper"),
    ],
    ids=["values", "characters", "depth"],
)
def test_arguments_too_big_to_check_are_refused_before_the_schema_runs(arguments, said):
    # The schema would name each of these values as a problem of its own (not a string, or
    # longer than 1): that only the size is answered shows the schema never ran.
    schema = {"type": "object", "properties": {"v": {"type": "string", "maxLength": 1}}}
    [problem] = check(schema, arguments).problems
    assert said in problem.message


def test_a_problem_quoting_a_nul_or_a_lone_surrogate_writes_it_escaped():
    # A model's field name with a NUL was quoted raw in "unknown fields: ...", and that
    # feedback is stored with the turn: PostgreSQL refused it (a 500 on an external step).
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    checked = validate_call({"t": tool(schema)}, "t", {"a\x00b": 1, "c": 2})
    feedback = checked.feedback()
    assert "\x00" not in feedback
    assert "a\\u0000b" in feedback
    assert all("\x00" not in p.path + p.message for p in checked.problems)


def test_a_schema_that_makes_the_check_exponential_is_stopped_at_the_time_limit():
    # anyOf over a recursive $ref: the first branch fails only after checking every level
    # below, the second checks them again. 16 levels took 30 s; 30 would take years.
    recursive = {
        "anyOf": [
            {"type": "array", "items": {"$ref": "#/$defs/n"}, "contains": {"const": "x"}},
            {"type": "array", "items": {"$ref": "#/$defs/n"}},
        ]
    }
    schema = {
        "type": "object",
        "properties": {"v": {"$ref": "#/$defs/n"}},
        "$defs": {"n": recursive},
    }
    nested: list = []
    for _ in range(30):
        nested = [nested]
    started = time.perf_counter()
    checked = validate_call({"t": tool(schema)}, "t", {"v": nested}, time_limit=0.5)
    assert time.perf_counter() - started < 10  # stopped near 0.5 s; unstopped, years
    [problem] = checked.problems
    assert "took longer than 0.5 s, so the call is refused" in problem.message
    # The same schema on a shallow value is checked as usual.
    assert validate_call({"t": tool(schema)}, "t", {"v": [[[]]]}, time_limit=0.5).ok
