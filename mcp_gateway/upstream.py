"""The upstream MCP servers, as the gateway's client: connect, list, call, read, get.

Async (the SDK's client) and framework-free: it runs on the gateway's event loop, never
touches the database, and turns every upstream answer into an UpstreamReply, the text
Guardian records and its guardian reads, with the SDK's result kept to hand on as is.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import UriTemplate

from mcp_gateway.config import ServerConfig
from mcp_gateway.tools import UpstreamReply

logger = logging.getLogger(__name__)

IDEMPOTENCY_KEY = "guardian/idempotency-key"
# How long one upstream request may take before it counts as failed (an error the model reads).
CALL_TIMEOUT_SECONDS = 300.0
# Pages a listing may have: an upstream whose cursor never ends cannot hang the gateway.
_MAX_PAGES = 100


class UpstreamError(RuntimeError):
    """An upstream server cannot be reached or listed; the message names it."""


class CallLost(RuntimeError):
    """A tools/call was sent (or may have been) and no answer came: the connection broke, the
    upstream timed out. Whether it ran is unknown; it must not be sent again."""


# JSON-RPC errors that are not the upstream's answer but the lack of one.
_NO_ANSWER = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})


def _where(server: ServerConfig) -> str:
    return server.url if server.url else " ".join(server.command)


def _size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _describe(block: Any) -> str:
    """One content block as text: text as is, embedded text resources included, anything
    else described (the guardian reads words, not bytes)."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return block.text
    if kind in ("image", "audio"):
        return f"[{kind} {block.mime_type}, {_size(block.data)} bytes]"
    if kind == "resource":
        return _resource_text(block.resource)
    if kind == "resource_link":
        return f"[resource link {block.uri}{f' ({block.name})' if block.name else ''}]"
    return f"[{kind or type(block).__name__} content]"


def _resource_text(contents: Any) -> str:
    text = getattr(contents, "text", None)
    if isinstance(text, str):
        return text
    mime = getattr(contents, "mime_type", None) or "application/octet-stream"
    return f"[resource {contents.uri} {mime}, {_size(getattr(contents, 'blob', ''))} bytes]"


def tool_reply(result: types.CallToolResult) -> UpstreamReply:
    """A tools/call result as Guardian reads it: the text parts joined, structured content as
    JSON (unless a text part already says exactly that), other parts described."""
    parts = [_describe(block) for block in result.content]
    structured = result.structured_content
    if structured is not None:
        texts = {
            json.dumps(value, ensure_ascii=False, sort_keys=True)
            for part in parts
            if (value := _loads(part)) is not None
        }
        # The SDKs' servers wrap a tool's plain return value as {"result": value} beside the
        # text of it: read twice, a planted line would count twice and the reviewer read it so.
        said = [structured]
        if isinstance(structured, dict) and set(structured) == {"result"}:
            said.append(structured["result"])
        if not any(
            (isinstance(value, str) and value in parts)
            or json.dumps(value, ensure_ascii=False, sort_keys=True) in texts
            for value in said
        ):
            parts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True))
    return UpstreamReply(text="\n".join(parts), is_error=bool(result.is_error), payload=result)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return None


def resource_reply(result: types.ReadResourceResult) -> UpstreamReply:
    return UpstreamReply(
        text="\n".join(_resource_text(contents) for contents in result.contents),
        is_error=False,
        payload=result,
    )


def prompt_reply(result: types.GetPromptResult) -> UpstreamReply:
    """A prompt as Guardian reads it: its messages' contents, as they will reach the model
    (its description is the listing's, passed through like the rest of it)."""
    text = "\n".join(_describe(message.content) for message in result.messages)
    return UpstreamReply(text=text, is_error=False, payload=result)


def failed_reply(server: str, what: str, exc: BaseException) -> UpstreamReply:
    """A request that raised (upstream gone, timeout, protocol error): a tool error."""
    detail = str(exc) or type(exc).__name__
    return UpstreamReply(
        text=f"The upstream server {server!r} failed {what}: {detail}", is_error=True, payload=None
    )


class Upstream:
    """One connected upstream server."""

    def __init__(self, config: ServerConfig, client: Client) -> None:
        self.config = config
        self.name = config.name
        self.client = client

    @property
    def capabilities(self) -> types.ServerCapabilities | None:
        try:
            return self.client.server_capabilities
        except RuntimeError:
            return None

    async def _pages(self, fetch, field: str) -> list:
        items: list = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await fetch(cursor)
            items.extend(getattr(page, field))
            cursor = page.next_cursor
            if not cursor:
                break
        return items

    async def list_tools(self) -> list[types.Tool]:
        if self.capabilities is not None and self.capabilities.tools is None:
            return []
        return await self._pages(lambda c: self.client.list_tools(cursor=c), "tools")

    async def list_resources(self) -> list[types.Resource]:
        if self.capabilities is None or self.capabilities.resources is None:
            return []
        return await self._pages(lambda c: self.client.list_resources(cursor=c), "resources")

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        if self.capabilities is None or self.capabilities.resources is None:
            return []
        return await self._pages(
            lambda c: self.client.list_resource_templates(cursor=c), "resource_templates"
        )

    async def list_prompts(self) -> list[types.Prompt]:
        if self.capabilities is None or self.capabilities.prompts is None:
            return []
        return await self._pages(lambda c: self.client.list_prompts(cursor=c), "prompts")

    async def call_tool(
        self, name: str, arguments: dict, idempotency_key: str, *, timeout: float | None = None
    ) -> UpstreamReply:
        """Call `name` once, its idempotency key in the request's `_meta`. An error the
        upstream answered is an error reply naming this server; no answer at all (connection
        closed, timed out, the transport failed mid-request) raises CallLost."""
        try:
            result = await self.client.call_tool(
                name,
                arguments,
                read_timeout_seconds=timeout or CALL_TIMEOUT_SECONDS,
                meta={IDEMPOTENCY_KEY: idempotency_key},
            )
        except MCPError as exc:
            logger.warning("upstream %s: tools/call %s failed: %s", self.name, name, exc)
            if exc.code in _NO_ANSWER:
                raise CallLost(f"the upstream server {self.name!r}: {exc}") from exc
            return failed_reply(self.name, f"to run {name!r}", exc)
        except Exception as exc:
            logger.warning("upstream %s: tools/call %s failed: %s", self.name, name, exc)
            raise CallLost(f"the upstream server {self.name!r}: {_reason(exc)}") from exc
        return tool_reply(result)

    async def read_resource(self, uri: str) -> UpstreamReply:
        try:
            return resource_reply(await self.client.read_resource(uri))
        except Exception as exc:
            logger.warning("upstream %s: resources/read %s failed: %s", self.name, uri, exc)
            return failed_reply(self.name, f"to read {uri!r}", exc)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> UpstreamReply:
        try:
            return prompt_reply(await self.client.get_prompt(name, arguments or None))
        except Exception as exc:
            logger.warning("upstream %s: prompts/get %s failed: %s", self.name, name, exc)
            return failed_reply(self.name, f"to give the prompt {name!r}", exc)


def _client(config: ServerConfig) -> Client:
    if config.command:
        params = StdioServerParameters(
            command=config.command[0],
            args=list(config.command[1:]),
            env=dict(config.env) or None,
            cwd=config.cwd or None,
        )
        transport = stdio_client(params)
    else:
        http = create_mcp_http_client(headers=dict(config.headers) or None)
        transport = streamable_http_client(config.url, http_client=http)
    # No response cache: every listing and read reaches the upstream, as the client asked.
    return Client(transport, cache=None, read_timeout_seconds=CALL_TIMEOUT_SECONDS)


class Upstreams:
    """Every configured upstream, connected for as long as the context is entered (enter and
    leave it in one task: the SDK's transports are task-bound)."""

    def __init__(self, servers: Sequence[ServerConfig]) -> None:
        self.configs = tuple(servers)
        self.servers: dict[str, Upstream] = {}
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Upstreams:
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            for config in self.configs:
                try:
                    client = await stack.enter_async_context(_client(config))
                except Exception as exc:
                    raise UpstreamError(
                        f"The upstream MCP server {config.name!r} ({_where(config)}) cannot be "
                        f"reached: {_reason(exc)}"
                    ) from exc
                self.servers[config.name] = Upstream(config, client)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.__aexit__(*exc_info)

    def __getitem__(self, name: str) -> Upstream:
        return self.servers[name]

    async def list_tools(self) -> dict[str, list[types.Tool]]:
        """Every server's tools, in config order, every page; UpstreamError naming the one
        that cannot list them."""
        listing: dict[str, list[types.Tool]] = {}
        for name, upstream in self.servers.items():
            try:
                listing[name] = await upstream.list_tools()
            except Exception as exc:
                raise UpstreamError(
                    f"The upstream MCP server {name!r} cannot list its tools: {_reason(exc)}"
                ) from exc
        return listing


def _reason(exc: BaseException) -> str:
    # anyio and the SDK wrap a failed start in an ExceptionGroup: say what is inside it.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return str(exc) or type(exc).__name__


def template_matches(template: str, uri: str) -> bool:
    """Whether a resource template (RFC 6570) could have made `uri`."""
    try:
        return UriTemplate.parse(template).match(uri) is not None
    except ValueError:
        return False
