"""Validating a proposed call before anything runs: each test names the failure it prevents."""

import copy
import hashlib
import json
import math
import socket
import urllib.request
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardian_core.engine.conditions import RiskClass
from guardian_core.engine.tools import (
    CallProblem,
    Tool,
    action_hash,
    call_signature,
    idempotency_key,
    validate_call,
)


def _never_called(arguments, *, idempotency_key):
    raise AssertionError("validation must never execute the tool")


def tool(name="get_weather", schema=None, risk=RiskClass.READ_ONLY):
    if schema is None:
        schema = {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        }
    return Tool(name, f"{name} for tests", schema, risk, _never_called)


def check(schema, arguments, name="t"):
    return validate_call({name: tool(name, schema)}, name, arguments)


WEATHER = {"get_weather": tool()}
ORDER = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "price": {"type": "number"},
        "gift": {"type": "boolean"},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                "required": ["sku"],
            },
        },
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "zip": {"type": "string"}},
        },
    },
}


# ---- a valid call -------------------------------------------------------------------------


def test_a_valid_call_is_ok_and_hands_back_exactly_its_arguments():
    checked = validate_call(WEATHER, "get_weather", '{"city": "Kyiv"}')
    assert checked.ok
    assert checked.problems == ()
    assert checked.arguments == {"city": "Kyiv"}
    assert checked.tool == "get_weather"
    assert checked.feedback() == "Arguments for get_weather fit."


def test_decoded_arguments_are_accepted_like_json_text():
    checked = validate_call(WEATHER, "get_weather", {"city": "Kyiv"})
    assert checked.ok
    assert checked.arguments == {"city": "Kyiv"}


def test_an_invalid_call_hands_back_no_arguments_to_execute():
    checked = validate_call(WEATHER, "get_weather", {"city": 3})
    assert not checked.ok
    assert checked.arguments is None


# ---- no coercion --------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["count", "price"])
def test_a_string_three_is_not_a_number(field):
    checked = check(ORDER, {field: "3"})
    assert not checked.ok
    assert checked.problems[0].path == field
    assert "'3' is not of type" in checked.problems[0].message


@pytest.mark.parametrize("field", ["count", "price"])
def test_true_is_not_an_integer(field):
    # bool subclasses int in Python: "Delivery window: True days".
    checked = check(ORDER, json.dumps({field: True}))
    assert not checked.ok
    assert checked.problems == (
        CallProblem(field, f"True is not of type '{'integer' if field == 'count' else 'number'}'"),
    )


def test_one_is_not_a_boolean():
    assert not check(ORDER, {"gift": 1}).ok


def test_the_actual_types_still_pass():
    assert check(ORDER, {"count": 3, "price": 2.5, "gift": True}).ok


# ---- unknown fields -----------------------------------------------------------------------


def test_unknown_fields_are_rejected_when_the_schema_says_nothing():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    checked = check(schema, {"city": "Kyiv", "units": "metric"})
    assert not checked.ok
    assert checked.problems == (CallProblem("", "unknown fields: units"),)


def test_an_object_schema_without_properties_takes_no_fields():
    checked = check({"type": "object"}, {"anything": 1})
    assert checked.problems == (CallProblem("", "unknown fields: anything"),)
    assert check({"type": "object"}, {}).ok


@pytest.mark.parametrize(
    "allowance",
    [
        {"additionalProperties": True},
        {"additionalProperties": {"type": "string"}},
        {"patternProperties": {"^x-": {"type": "string"}}},
        {"unevaluatedProperties": True},
    ],
    ids=["additional-true", "additional-schema", "pattern", "unevaluated-true"],
)
def test_unknown_fields_are_allowed_when_the_schema_allows_them(allowance):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, **allowance}
    assert check(schema, {"city": "Kyiv", "x-units": "metric"}).ok


def test_an_allowed_extra_field_must_still_fit_the_schema_for_extras():
    schema = {"type": "object", "additionalProperties": {"type": "string"}}
    checked = check(schema, {"units": 5})
    assert checked.problems == (CallProblem("units", "5 is not of type 'string'"),)


def test_an_explicit_no_to_extra_fields_is_reported_as_unknown_fields():
    schema = {
        "type": "object",
        "patternProperties": {"^x-": {"type": "string"}},
        "additionalProperties": False,
    }
    checked = check(schema, {"x-units": "metric", "units": "metric"})
    assert checked.problems == (CallProblem("", "unknown fields: units"),)


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"address": {"street": "Khreshchatyk", "flat": 3}}, "address"),
        ({"items": [{"sku": "A"}, {"sku": "B", "colour": "red"}]}, "items/1"),
    ],
    ids=["nested-object", "array-of-objects"],
)
def test_nested_unknown_fields_are_rejected(arguments, path):
    checked = check(ORDER, arguments)
    assert not checked.ok
    assert len(checked.problems) == 1
    assert checked.problems[0].path == path
    assert checked.problems[0].message.startswith("unknown fields: ")


POINT = {"$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
REF = {"$ref": "#/$defs/Point"}


@pytest.mark.parametrize(
    ("where", "good", "bad", "path"),
    [
        (REF, {"x": 1}, {"x": 1, "z": 2}, "p"),
        ({"additionalProperties": REF}, {"k": {"x": 1}}, {"k": {"x": 1, "z": 2}}, "p/k"),
        ({"prefixItems": [REF]}, [{"x": 1}], [{"x": 1, "z": 2}], "p/0"),
        ({"anyOf": [REF, {"type": "null"}]}, {"x": 1}, {"x": 1, "z": 2}, "p"),
    ],
    ids=["ref", "additional-properties", "prefix-items", "any-of"],
)
def test_unknown_fields_are_rejected_wherever_an_object_schema_sits(where, good, bad, path):
    schema = {"type": "object", "properties": {"p": where}, **POINT}
    assert check(schema, {"p": good}).ok
    assert check(schema, {"p": bad}).problems == (CallProblem(path, "unknown fields: z"),)


def test_parts_of_an_all_of_may_each_declare_some_of_the_fields():
    # Closing each part on its own would reject the fields the other part declares.
    schema = {
        "type": "object",
        "allOf": [
            {"properties": {"city": {"type": "string"}}, "required": ["city"]},
            {"properties": {"units": {"enum": ["metric", "imperial"]}}},
        ],
    }
    assert check(schema, {"city": "Kyiv", "units": "metric"}).ok
    checked = check(schema, {"city": "Kyiv", "units": "metric", "town": "Kyiv"})
    assert checked.problems == (CallProblem("", "unknown fields: town"),)


def test_a_ref_with_sibling_properties_accepts_the_fields_of_both():
    schema = {
        "type": "object",
        "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "integer"}}}},
        "properties": {
            "order": {"$ref": "#/$defs/Base", "properties": {"note": {"type": "string"}}}
        },
    }
    assert check(schema, {"order": {"id": 1, "note": "fragile"}}).ok
    checked = check(schema, {"order": {"id": 1, "note": "fragile", "rush": True}})
    assert checked.problems == (CallProblem("order", "unknown fields: rush"),)


def test_a_bad_value_in_a_nullable_object_is_named_rather_than_called_unknown():
    # The shape pydantic gives an optional nested model.
    schema = {
        "type": "object",
        "$defs": {
            "Address": {
                "type": "object",
                "properties": {"street": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["street"],
            }
        },
        "properties": {"address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]}},
    }
    assert check(schema, {"address": None}).ok
    assert check(schema, {"address": {"street": "Main", "zip": "01001"}}).ok
    checked = check(schema, {"address": {"street": "Main", "zip": 1001}})
    assert checked.problems == (CallProblem("address/zip", "1001 is not of type 'string'"),)
    checked = check(schema, {"address": {"zip": "01001", "flat": 3}})
    assert checked.problems == (
        CallProblem("address", "missing required fields: street"),
        CallProblem("address", "unknown fields: flat"),
    )


def test_a_field_only_a_failing_alternative_declares_is_not_let_through():
    schema = {
        "type": "object",
        "anyOf": [
            {"properties": {"city": {"type": "string"}}},
            {"properties": {"zip": {"type": "string"}}},
        ],
    }
    assert check(schema, {"city": "Kyiv", "zip": "01001"}).ok
    # The first alternative fits, the one declaring zip does not: zip is not allowed.
    checked = check(schema, {"city": "Kyiv", "zip": 1001})
    assert checked.problems == (CallProblem("", "fields no matching alternative allows: zip"),)


def test_values_that_look_like_schemas_are_not_rewritten():
    # A blind walk would add additionalProperties to the const and the default.
    literal = {"type": "object", "properties": {}}
    schema = {
        "type": "object",
        "properties": {"spec": {"const": literal, "default": literal}},
    }
    assert check(schema, {"spec": literal}).ok


def test_a_schema_that_accepts_anything_is_left_open():
    schema = {"type": "object", "properties": {"metadata": {"description": "free-form"}}}
    assert check(schema, {"metadata": {"any": {"thing": 1}}}).ok


def test_a_field_named_like_a_keyword_is_not_taken_for_one():
    schema = {"type": "object", "properties": {"items": {"type": "object"}}}
    checked = check(schema, {"items": {"x": 1}})
    assert checked.problems == (CallProblem("items", "unknown fields: x"),)


# ---- not an object, not JSON --------------------------------------------------------------


@pytest.mark.parametrize("as_text", [True, False], ids=["json-text", "decoded"])
@pytest.mark.parametrize("value", [None, 42, "Kyiv", [1, 2], True], ids=repr)
def test_arguments_that_are_not_an_object_are_rejected(value, as_text):
    raw = json.dumps(value) if as_text else value
    checked = validate_call(WEATHER, "get_weather", raw)
    assert not checked.ok
    assert checked.arguments is None
    (problem,) = checked.problems
    if value == "Kyiv" and not as_text:
        # Text is always read as JSON text, as models send it, and Kyiv is not JSON.
        assert problem.message.startswith("arguments are not valid JSON: ")
    else:
        assert problem.message.startswith("arguments must be a JSON object, got ")


def test_unparseable_json_is_rejected():
    checked = validate_call(WEATHER, "get_weather", '{"city": "Kyiv"')
    assert not checked.ok
    (problem,) = checked.problems
    assert problem.path == ""
    # The parser's own words say where the text broke.
    assert problem.message.startswith("arguments are not valid JSON: Expecting ")
    assert "column" in problem.message
    assert checked.feedback().startswith("Arguments for get_weather do not fit: arguments are")


def test_empty_text_is_not_an_empty_object():
    assert not validate_call(WEATHER, "get_weather", "").ok


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ('{"city": NaN}', "NaN"),
        ('{"city": Infinity}', "Infinity"),
        ('{"city": -Infinity}', "-Infinity"),
        ('{"city": 1e400}', "1e400"),
    ],
)
def test_numbers_json_does_not_have_are_rejected_by_the_parser(raw, named):
    checked = check({"type": "object", "properties": {"city": {}}}, raw)
    assert not checked.ok
    (problem,) = checked.problems
    assert problem.message.startswith("arguments are not valid JSON: ")
    assert named in problem.message


@pytest.mark.parametrize(
    "value",
    [{"x": math.nan}, {"x": math.inf}, {"x": (1, 2)}, {1: "x"}, {"x": {1, 2}}, {"x": object()}],
    ids=["nan", "inf", "tuple", "int-key", "set", "object"],
)
def test_decoded_values_that_are_not_json_data_are_rejected(value):
    checked = check({"type": "object", "additionalProperties": True}, value)
    assert not checked.ok
    assert checked.problems[0].message.startswith("arguments are not JSON data")


def test_text_that_cannot_be_hashed_is_rejected_rather_than_breaking_the_idempotency_key():
    checked = validate_call(WEATHER, "get_weather", '{"city": "\\ud800"}')
    assert not checked.ok
    assert "not valid Unicode" in checked.problems[0].message


@pytest.mark.parametrize("as_text", [True, False], ids=["json-text", "decoded"])
def test_deeply_nested_arguments_are_rejected_not_crashed(as_text):
    if as_text:
        raw = '{"city": ' + "[" * 100_000 + "]" * 100_000 + "}"
    else:
        raw = inner = {}
        for _ in range(100_000):
            inner["a"] = {}
            inner = inner["a"]
    checked = check({"type": "object", "additionalProperties": True}, raw)
    assert not checked.ok
    assert checked.problems == (CallProblem("", "arguments are nested too deeply"),)


# ---- unknown tools ------------------------------------------------------------------------


def test_an_unknown_tool_is_rejected_naming_the_known_tools():
    tools = {"refund": tool("refund"), "get_weather": tool(), "lookup": tool("lookup")}
    checked = validate_call(tools, "weather", '{"city": "Kyiv"}')
    assert not checked.ok
    assert checked.arguments is None
    assert not checked.known_tool
    assert checked.feedback() == (
        "There is no tool named 'weather'; known tools: get_weather, lookup, refund."
    )


@pytest.mark.parametrize("name", [None, 3, ["get_weather"]], ids=repr)
def test_a_tool_name_that_is_not_text_is_rejected_not_crashed(name):
    checked = validate_call(WEATHER, name, "{}")
    assert not checked.ok
    assert "known tools: get_weather" in checked.feedback()


# ---- every problem at once ----------------------------------------------------------------


def test_every_problem_is_reported_at_once():
    checked = validate_call(WEATHER, "get_weather", '{"town": "Kyiv"}')
    assert checked.problems == (
        CallProblem("", "missing required fields: city"),
        CallProblem("", "unknown fields: town"),
    )
    # One message, both facts: the actor fixes the call in one round trip.
    assert checked.feedback() == (
        "Arguments for get_weather do not fit: missing required fields: city; unknown fields: town."
    )


def test_every_problem_in_every_field_is_reported_at_once():
    arguments = {
        "count": "3",
        "gift": 1,
        "items": [{"qty": True}, {"sku": "B", "qty": 1, "colour": "red"}],
        "address": {"zip": 1001},
        "coupon": "X",
    }
    checked = check(ORDER, arguments)
    assert checked.problems == (
        CallProblem("", "unknown fields: coupon"),
        CallProblem("address/zip", "1001 is not of type 'string'"),
        CallProblem("count", "'3' is not of type 'integer'"),
        CallProblem("gift", "1 is not of type 'boolean'"),
        CallProblem("items/0", "missing required fields: sku"),
        CallProblem("items/0/qty", "True is not of type 'integer'"),
        CallProblem("items/1", "unknown fields: colour"),
    )
    assert checked.feedback().count("; ") == 6


def test_the_feedback_does_not_depend_on_the_order_of_the_fields():
    schema = {"type": "object", "required": ["b", "a", "c"]}
    one = check(schema, '{"z": 1, "y": 2, "x": 3}')
    other = check(schema, '{"x": 3, "z": 1, "y": 2}')
    assert (
        one.feedback()
        == other.feedback()
        == (
            "Arguments for t do not fit: missing required fields: a, b, c; unknown fields: x, y, z."
        )
    )


def test_array_positions_sort_as_numbers():
    schema = {
        "type": "object",
        "properties": {"n": {"type": "array", "items": {"type": "integer"}}},
    }
    checked = check(schema, {"n": ["x"] * 11})
    assert [p.path for p in checked.problems] == [f"n/{i}" for i in range(11)]


def test_a_flood_of_unknown_fields_gives_a_short_message():
    checked = check({"type": "object"}, {f"field{i:04}": i for i in range(5000)})
    assert len(checked.feedback()) < 2000
    assert checked.feedback().endswith("and 4980 more.")


def test_a_field_name_with_a_slash_is_not_read_as_a_path():
    schema = {"type": "object", "properties": {"a/b": {"type": "integer"}}}
    assert check(schema, {"a/b": "1"}).problems[0].path == "a~1b"


# ---- the tool and its schema --------------------------------------------------------------


def test_the_tool_schema_is_not_modified_by_validation():
    schema = copy.deepcopy(ORDER)
    schema["allOf"] = [{"properties": {"count": {"minimum": 0}}}]
    before = copy.deepcopy(schema)
    weather = tool("order", schema)
    assert weather.schema == before
    check_call = validate_call({"order": weather}, "order", {"address": {"flat": 1}, "x": 1})
    assert not check_call.ok
    assert weather.schema == before
    assert schema == before
    assert "additionalProperties" not in json.dumps(weather.schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"properties": {"city": {"type": "string"}}},
        {"type": ["object", "null"]},
        {"type": "object", "properties": {"city": {"type": "strng"}}},
        {"type": "object", "required": "city"},
        {"type": "object", "properties": {"city": {"type": "string", "pattern": "("}}},
        {"type": "object", "properties": {"city": {"$ref": "#/$defs/missing"}}},
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
        ["type", "object"],
    ],
    ids=[
        "not-an-object-type",
        "no-type",
        "object-or-null",
        "misspelt-type",
        "required-not-a-list",
        "bad-regex",
        "dangling-ref",
        "another-draft",
        "not-a-mapping",
    ],
)
def test_a_tool_with_an_invalid_schema_cannot_be_built(schema):
    with pytest.raises(ValueError, match="schema"):
        Tool("t", "", schema, RiskClass.READ_ONLY, _never_called)


def test_a_remote_ref_is_never_fetched(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the engine must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    schema = {"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}}
    with pytest.raises(ValueError, match="cannot be resolved"):
        Tool("t", "", schema, RiskClass.READ_ONLY, _never_called)


def test_a_remote_ref_added_after_the_tool_was_built_is_still_never_fetched(monkeypatch):
    fetched = []
    monkeypatch.setattr(socket.socket, "connect", lambda *args: fetched.append(args))
    monkeypatch.setattr(urllib.request, "urlopen", lambda *args, **kw: fetched.append(args))
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    built = tool("t", schema)
    schema["properties"]["x"] = {"$ref": "https://example.com/x.json"}  # the dict is mutable
    checked = validate_call({"t": built}, "t", {"x": 1})
    assert fetched == []
    assert not checked.ok
    assert "cannot be used" in checked.problems[0].message


def test_a_schema_made_of_read_only_mappings_works():
    schema = MappingProxyType(
        {
            "type": "object",
            "properties": MappingProxyType({"city": MappingProxyType({"type": "string"})}),
            "required": ("city",),
        }
    )
    built = tool("t", schema)
    assert validate_call({"t": built}, "t", {"city": "Kyiv"}).ok
    checked = validate_call({"t": built}, "t", {"town": "Kyiv"})
    assert checked.feedback() == (
        "Arguments for t do not fit: missing required fields: city; unknown fields: town."
    )


def test_a_risk_class_given_as_text_becomes_a_risk_class():
    assert tool(risk="irreversible").risk_class is RiskClass.IRREVERSIBLE
    with pytest.raises(ValueError, match="RiskClass"):
        tool(risk="harmless")


def test_a_tool_needs_a_name_and_a_callable():
    with pytest.raises(ValueError, match="name"):
        Tool("", "", {"type": "object"}, RiskClass.READ_ONLY, _never_called)
    with pytest.raises(TypeError, match="callable"):
        Tool("t", "", {"type": "object"}, RiskClass.READ_ONLY, "not a function")


# ---- idempotency key ----------------------------------------------------------------------

KEY = {"run_id": "run-1", "turn_index": 3, "position": 1, "tool": "refund", "arguments": {}}


def key(**changes):
    return idempotency_key(**{**KEY, **changes})


def test_the_idempotency_key_ignores_the_order_of_argument_keys():
    one = key(arguments={"order": "ord_4472", "amount": 10, "meta": {"a": 1, "b": 2}})
    other = key(arguments={"meta": {"b": 2, "a": 1}, "amount": 10, "order": "ord_4472"})
    assert one == other


def test_the_idempotency_key_is_64_hex_digits():
    value = key(arguments={"order": "ord_4472"})
    assert len(value) == 64
    assert set(value) <= set("0123456789abcdef")


def test_the_idempotency_key_is_the_same_for_the_same_call():
    assert key(arguments={"order": "ord_4472"}) == key(arguments={"order": "ord_4472"})


@pytest.mark.parametrize(
    "change",
    [
        {"run_id": "run-2"},
        {"turn_index": 4},
        {"position": 2},
        {"tool": "refund_v2"},
        {"arguments": {"order": "ord_9999"}},
        {"arguments": {"order": "ord_4472", "amount": 10}},
        {"arguments": {"order": ["ord_4472"]}},
    ],
    ids=["run", "turn", "position", "tool", "argument-value", "extra-argument", "argument-type"],
)
def test_the_idempotency_key_changes_when_any_part_changes(change):
    base = key(arguments={"order": "ord_4472"})
    assert key(**{"arguments": {"order": "ord_4472"}, **change}) != base


def test_a_run_id_given_as_a_number_or_as_text_is_the_same_run():
    assert key(run_id=7) == key(run_id="7")


@pytest.mark.parametrize("change", [{"turn_index": True}, {"position": "1"}, {"run_id": None}])
def test_the_idempotency_key_refuses_parts_of_the_wrong_type(change):
    with pytest.raises(TypeError):
        key(**change)


# ---- action hash --------------------------------------------------------------------------


def test_the_action_hash_is_the_sha256_of_the_canonical_call():
    text = '{"arguments":{"amount":49.9,"order_id":"ord_4472"},"idempotency_key":"k","tool":"t"}'
    expected = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert action_hash("t", {"order_id": "ord_4472", "amount": 49.9}, "k") == expected


def test_the_action_hash_writes_non_ascii_as_itself_in_utf8():
    text = '{"arguments":{"note":"café"},"idempotency_key":"k","tool":"t"}'
    expected = hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert action_hash("t", {"note": "café"}, "k") == expected


def test_the_action_hash_ignores_the_order_of_argument_keys():
    one = action_hash("t", {"a": 1, "b": {"x": 1, "y": 2}}, "k")
    assert one == action_hash("t", {"b": {"y": 2, "x": 1}, "a": 1}, "k")


@pytest.mark.parametrize(
    "change",
    [
        {"tool": "u"},
        {"arguments": {"amount": 49.91}},
        {"arguments": {"amount": 49.9, "note": None}},
        {"arguments": {"amount": "49.9"}},
        {"idempotency_key": "k2"},
    ],
    ids=["tool", "argument-value", "extra-argument", "argument-type", "key"],
)
def test_the_action_hash_changes_when_any_part_of_the_action_changes(change):
    base = {"tool": "t", "arguments": {"amount": 49.9}, "idempotency_key": "k"}
    assert action_hash(**{**base, **change}) != action_hash(**base)


def test_the_action_hash_refuses_what_is_not_json():
    with pytest.raises(ValueError, match="Out of range float values"):
        action_hash("t", {"x": math.nan}, "k")


# ---- call signature -----------------------------------------------------------------------


def test_the_call_signature_is_the_tool_and_canonical_arguments():
    assert call_signature("get_weather", {"units": "metric", "city": "Kyiv"}) == (
        'get_weather:{"city":"Kyiv","units":"metric"}'
    )


def test_the_call_signature_ignores_key_order_and_json_text_versus_decoded():
    decoded = call_signature("t", {"b": 1, "a": {"y": 2, "x": 1}})
    assert decoded == call_signature("t", {"a": {"x": 1, "y": 2}, "b": 1})
    assert decoded == call_signature("t", '{"b": 1, "a": {"y": 2, "x": 1}}')


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (("t", {"a": 1}), ("u", {"a": 1})),
        (("t", {"a": 1}), ("t", {"a": 2})),
        (("t", {"a": 1}), ("t", {"a": True})),
        (("t", {"a": 1}), ("t", {"a": "1"})),
        (("t", {"a": 1}), ("t", {"a": 1, "b": None})),
    ],
    ids=["tool", "value", "true-vs-one", "text-vs-number", "extra-null"],
)
def test_the_call_signature_tells_different_calls_apart(one, other):
    assert call_signature(*one) != call_signature(*other)


@pytest.mark.parametrize("arguments", ["{not json", {"x": math.nan}, (1, 2)], ids=repr)
def test_the_call_signature_of_junk_arguments_does_not_raise(arguments):
    signature = call_signature("t", arguments)
    assert signature.startswith("t:")
    assert signature == call_signature("t", arguments)


# ---- any JSON at all ----------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)
arguments = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(["a", "b"]), json_values, max_size=2),
)
ONE_INTEGER = {"t": tool("t", {"type": "object", "properties": {"a": {"type": "integer"}}})}


def _fits(value) -> bool:
    """What the schema means, said independently of jsonschema."""
    if not isinstance(value, dict) or set(value) - {"a"}:
        return False
    a = value.get("a", 0)
    if isinstance(a, bool):
        return False
    return isinstance(a, int) or (isinstance(a, float) and a.is_integer())


@settings(database=None, deadline=None)
@given(value=arguments, as_text=st.booleans())
def test_any_json_value_is_either_accepted_as_is_or_rejected_with_a_reason(value, as_text):
    checked = validate_call(ONE_INTEGER, "t", json.dumps(value) if as_text else value)
    if checked.ok:
        assert isinstance(value, dict)
        assert checked.arguments == value
        assert idempotency_key(
            run_id=1, turn_index=0, position=0, tool="t", arguments=checked.arguments
        )
    else:
        assert len(checked.problems) >= 1
        assert checked.arguments is None
        assert checked.feedback().startswith("Arguments for t do not fit: ")
    assert checked.ok == _fits(value)
