"""Upstream MCP tools as Guardian knows them: their names, schemas and declared risk floors.

Pure Python (no Django): the gateway's server and its tests read it without a database.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The names both sides accept: Guardian's tool names (runs/validation.py _TOOL_NAME:
# ^[A-Za-z0-9_.\-]{1,120}$) and the MCP clients' (^[a-zA-Z0-9_-]{1,64}$: no dot, 64 at most).
CLIENT_NAME = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_\-]")
_MAX = 64
SEPARATOR = "__"

READ_ONLY = "read_only"
REVERSIBLE_WRITE = "reversible_write"
IRREVERSIBLE = "irreversible"
REGULATED = "regulated"
RISK_CLASSES = (READ_ONLY, REVERSIBLE_WRITE, IRREVERSIBLE, REGULATED)


@dataclass(frozen=True)
class GatewayTool:
    """A tool as Guardian knows it (the interface mcp_gateway.guarding reads)."""

    name: str  # the name the client sees (namespaced on a clash)
    server: str  # the upstream server's name in the config
    upstream_name: str  # its name on that server
    description: str
    input_schema: dict  # the upstream's JSON Schema
    risk_class: str  # the declared floor: read_only|reversible_write|irreversible|regulated


@dataclass(frozen=True)
class UpstreamReply:
    """An upstream's answer (the interface mcp_gateway.guarding reads)."""

    text: str  # the reply as text: what Guardian records and its guardian reads
    is_error: bool  # the upstream answered isError (or the call raised)
    payload: object  # the SDK result to hand the client when allowed


def _hint(annotations: Any, snake: str, camel: str) -> bool | None:
    if annotations is None:
        return None
    if isinstance(annotations, Mapping):
        value = annotations.get(camel, annotations.get(snake))
    else:
        value = getattr(annotations, snake, None)
    return value if isinstance(value, bool) else None


def risk_floor(annotations: Any, override: str | None = None) -> str:
    """A tool's declared risk floor from its MCP annotations; the admin's override wins.

    readOnlyHint true: read_only. Otherwise the tool may write, and the MCP spec's default for
    destructiveHint is true: absent or true is irreversible (the safe side: a person confirms
    it), explicitly false is reversible_write. Nothing that may write is below
    reversible_write, whatever idempotentHint and openWorldHint say.
    """
    if override:
        if override not in RISK_CLASSES:
            raise ValueError(f"risk class {override!r} is not one of {', '.join(RISK_CLASSES)}")
        return override
    if _hint(annotations, "read_only_hint", "readOnlyHint") is True:
        return READ_ONLY
    if _hint(annotations, "destructive_hint", "destructiveHint") is False:
        return REVERSIBLE_WRITE
    return IRREVERSIBLE


def _suffix(server: str, tool: str) -> str:
    return hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]


def _fit(name: str, server: str, tool: str) -> str:
    """`name` with what a client or Guardian refuses replaced, cut to 64 characters (a cut
    name ends in a hash of where it came from, so two long names stay two)."""
    name = _NOT_ALLOWED.sub("_", name) or "tool"
    if len(name) > _MAX:
        name = f"{name[: _MAX - 9]}_{_suffix(server, tool)}"
    return name


def gateway_tools(
    listing: Mapping[str, Sequence[Any]],
    overrides: Mapping[str, Mapping[str, str]] | None = None,
    *,
    reserved: Collection[str] = (),
) -> list[GatewayTool]:
    """The upstream tools ({server: [mcp Tool, ...]}, in config order) as the client sees
    them: a tool keeps its name unless another server's tool has the same one, or the name is
    `reserved` (Guardian's own registered tools' names): then it becomes `<tool>__<server>`.
    The tool's own name comes first, as tool names are written (verb first): the local
    guardian reads `lookup_order__shop` as read-only (0.96), as it does `lookup_order`, but
    `shop__lookup_order` as likely regulated (0.49).
    Names are made valid for Guardian and MCP clients, and unique. `overrides` is the admin's
    risk class per tool, per server ({server: {tool: class}})."""
    overrides = overrides or {}
    entries = [(server, tool) for server, tools in listing.items() for tool in tools]
    plain = Counter(_fit(tool.name, server, tool.name) for server, tool in entries)
    result: list[GatewayTool] = []
    taken: set[str] = set()
    for server, tool in entries:
        name = _fit(tool.name, server, tool.name)
        if plain[name] > 1 or name in reserved:
            name = _fit(f"{tool.name}{SEPARATOR}{server}", server, tool.name)
        if name in taken:
            # Still two of one name (one server's "a.b" and "a_b"): the hash tells them apart.
            name = f"{name[: _MAX - 9]}_{_suffix(server, tool.name)}"
        taken.add(name)
        result.append(
            GatewayTool(
                name=name,
                server=server,
                upstream_name=tool.name,
                description=tool.description or "",
                input_schema=dict(tool.input_schema or {"type": "object"}),
                risk_class=risk_floor(
                    getattr(tool, "annotations", None), overrides.get(server, {}).get(tool.name)
                ),
            )
        )
    return result
