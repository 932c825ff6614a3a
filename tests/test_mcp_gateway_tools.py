"""Upstream MCP tools as Guardian knows them: risk floors from annotations, names that fit."""

import re

import mcp_types as types
from hypothesis import given
from hypothesis import strategies as st

from mcp_gateway.tools import CLIENT_NAME, gateway_tools, risk_floor

GUARDIAN_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,120}$")  # runs/validation.py _TOOL_NAME


def _tool(name: str, **hints) -> types.Tool:
    annotations = types.ToolAnnotations(**hints) if hints else None
    return types.Tool(
        name=name,
        description=f"{name} tool",
        input_schema={"type": "object", "properties": {"x": {"type": "string"}}},
        annotations=annotations,
    )


def test_read_only_hint_is_read_only_even_beside_a_destructive_hint():
    assert risk_floor(types.ToolAnnotations(read_only_hint=True)) == "read_only"
    assert (
        risk_floor(types.ToolAnnotations(read_only_hint=True, destructive_hint=True)) == "read_only"
    )


def test_no_annotations_or_no_destructive_hint_is_irreversible_the_specs_default():
    assert risk_floor(None) == "irreversible"
    assert risk_floor(types.ToolAnnotations()) == "irreversible"
    assert risk_floor(types.ToolAnnotations(read_only_hint=False)) == "irreversible"
    assert risk_floor(types.ToolAnnotations(destructive_hint=True)) == "irreversible"


def test_a_write_declared_not_destructive_is_a_reversible_write_never_lower():
    assert risk_floor(types.ToolAnnotations(destructive_hint=False)) == "reversible_write"
    for idempotent in (True, False):
        for open_world in (True, False):
            hints = types.ToolAnnotations(
                destructive_hint=False, idempotent_hint=idempotent, open_world_hint=open_world
            )
            assert risk_floor(hints) == "reversible_write"


def test_annotations_as_a_plain_mapping_read_the_same():
    assert risk_floor({"readOnlyHint": True}) == "read_only"
    assert risk_floor({"destructiveHint": False}) == "reversible_write"


def test_the_admins_override_wins_both_ways():
    assert risk_floor(types.ToolAnnotations(read_only_hint=True), "irreversible") == "irreversible"
    assert risk_floor(None, "read_only") == "read_only"
    assert (
        gateway_tools({"s": [_tool("rm")]}, {"s": {"rm": "regulated"}})[0].risk_class == "regulated"
    )


def test_only_clashing_names_are_namespaced_by_server():
    tools = gateway_tools(
        {
            "files": [_tool("search", read_only_hint=True), _tool("delete")],
            "web": [_tool("search", read_only_hint=True), _tool("fetch", read_only_hint=True)],
        }
    )
    assert [(t.name, t.server, t.upstream_name) for t in tools] == [
        ("search__files", "files", "search"),
        ("delete", "files", "delete"),
        ("search__web", "web", "search"),
        ("fetch", "web", "fetch"),
    ]
    assert tools[0].description == "search tool"
    assert tools[0].input_schema["properties"] == {"x": {"type": "string"}}
    assert [t.risk_class for t in tools] == ["read_only", "irreversible", "read_only", "read_only"]


def test_names_clients_refuse_are_made_valid_and_kept_apart():
    tools = gateway_tools({"s": [_tool("a.b"), _tool("a_b"), _tool("x" * 100), _tool("x" * 101)]})
    names = [t.name for t in tools]
    assert len(set(names)) == 4
    assert all(CLIENT_NAME.match(name) and GUARDIAN_NAME.match(name) for name in names)
    assert [t.upstream_name for t in tools] == ["a.b", "a_b", "x" * 100, "x" * 101]


_names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=90
)


@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,31}", fullmatch=True),
        st.lists(_names, max_size=6, unique=True),
        max_size=4,
    )
)
def test_every_listing_gives_unique_valid_names_and_keeps_where_each_came_from(listing):
    tools = gateway_tools({server: [_tool(n) for n in names] for server, names in listing.items()})
    names = [t.name for t in tools]
    assert len(names) == len(set(names))
    assert all(CLIENT_NAME.match(name) and GUARDIAN_NAME.match(name) for name in names)
    assert [(t.server, t.upstream_name) for t in tools] == [
        (server, name) for server, names in listing.items() for name in names
    ]
    # A name that was valid and clashed with nothing is passed through unchanged.
    all_names = [name for names in listing.values() for name in names]
    for tool in tools:
        if CLIENT_NAME.match(tool.upstream_name) and all_names.count(tool.upstream_name) == 1:
            fitted = [t for t in tools if t.upstream_name == tool.upstream_name]
            assert fitted[0].name == tool.upstream_name or "__" in fitted[0].name
