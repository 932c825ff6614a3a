"""The gateway's MCP server: the client's side, over stdio or Streamable HTTP.

One MCP session is one GuardedSession (mcp_gateway.guarding), one Guardian run: stdio's is the
process, HTTP's is the Mcp-Session-Id. Tool calls, resource reads and prompt gets go through it
in a worker thread (it is synchronous Django code: never the ORM on the event loop), one at a
time per session, since a run's steps are sequential; the upstream is called back on the loop.
Listings pass through untouched and are not turns.

The gateway serves the handshake era of MCP only (initialize, then a session): the 2026
per-request era has no session for a run to live in. Its `server/discover` advertises the
handshake versions, which an SDK client in "auto" mode reads as "use initialize".
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.runner import serve_loop
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from mcp_gateway.config import GatewayConfig
from mcp_gateway.tools import CLIENT_NAME, GatewayTool, UpstreamReply, gateway_tools
from mcp_gateway.upstream import CallLost, Upstreams, template_matches

logger = logging.getLogger(__name__)

# A held call's request stays open; the client hears from it at least this often (seconds),
# so that neither it nor a proxy on the way takes the silence for a dead server.
PROGRESS_EVERY_SECONDS = 4.0
GATEWAY_VERSION = "1"
# Where an HTTP request's checked credentials travel from the ASGI layer to the handlers.
SCOPE_USER = "guardian.user_id"
_STATE_KEY = "guardian.session"

SessionFactory = Callable[..., Any]


def _guarded_session_class() -> SessionFactory:
    # Imported when the first session opens: guarding is Django code the lead's bridge owns.
    from mcp_gateway.guarding import GuardedSession

    return GuardedSession


def _outcome_unknown() -> type[Exception]:
    from mcp_gateway.guarding import OutcomeUnknown

    return OutcomeUnknown


@dataclass
class _Session:
    """The per-MCP-session state kept on the SDK's connection."""

    guarded: Any  # GuardedSession
    owner_id: int
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class _Unavailable(Exception):
    """The session cannot be opened; the message is for the model (a tool error)."""


@dataclass(frozen=True)
class Catalogue:
    """What the upstreams offer, as the client sees it: tools by the gateway's names."""

    tools: Mapping[str, GatewayTool]
    listed: Mapping[str, types.Tool]  # the upstream's Tool under the gateway's name


def catalogue(
    listing: Mapping[str, Sequence[types.Tool]], overrides, reserved: Collection[str] = ()
) -> Catalogue:
    tools = gateway_tools(listing, overrides, reserved=reserved)
    upstream = {(server, tool.name): tool for server, tools_ in listing.items() for tool in tools_}
    listed = {
        tool.name: upstream[(tool.server, tool.upstream_name)].model_copy(
            update={"name": tool.name}
        )
        for tool in tools
    }
    return Catalogue(tools={tool.name: tool for tool in tools}, listed=listed)


def _fit_names(names: Sequence[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """Prompt names as the client sees them: namespaced by server only on a clash."""
    counts: dict[str, int] = {}
    for _, name in names:
        counts[name] = counts.get(name, 0) + 1
    fitted: dict[str, tuple[str, str]] = {}
    for server, name in names:
        shown = name if counts[name] == 1 else f"{server}__{name}"
        fitted[shown] = (server, name)
    return fitted


class Gateway:
    """The MCP server the client talks to, over the connected upstreams."""

    def __init__(
        self,
        config: GatewayConfig,
        upstreams: Upstreams,
        listing: Mapping[str, Sequence[types.Tool]],
        *,
        stdio_owner_id: int | None = None,
        session_factory: SessionFactory | None = None,
        environ: Mapping[str, str] | None = None,
        reserved: Collection[str] = (),
    ) -> None:
        self.config = config
        self.upstreams = upstreams
        # `reserved`: Guardian's registered tools' names, which a run's own tools cannot take.
        self.catalogue = catalogue(listing, config.overrides(), reserved)
        self.stdio_owner_id = stdio_owner_id
        self.session_factory = session_factory or _guarded_session_class()
        self.environ = os.environ if environ is None else environ
        self._resources: dict[str, str] = {}  # uri -> server, from the last listing
        self._templates: list[tuple[str, str]] = []  # (uri template, server)
        self._prompts: dict[str, tuple[str, str]] = {}  # shown name -> (server, name)
        self.server = Server(
            "guardian-mcp-gateway",
            version=GATEWAY_VERSION,
            instructions=(
                "Guardian guards these tools: a call may wait for a person's approval, be "
                "refused with a reason, or have its output withheld pending review."
            ),
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            on_list_prompts=self.list_prompts,
            on_get_prompt=self.get_prompt,
        )
        self.server.add_request_handler("server/discover", types.RequestParams, self._discover)
        self.server.middleware.append(_handshake_era_only)

    # ---- sessions ---------------------------------------------------------------------------

    def _goal(self, ctx) -> str:
        goal = self.config.goal
        request = getattr(ctx, "request", None)
        if goal.header and request is not None:
            value = request.headers.get(goal.header, "").strip()
            if value:
                return value
        if goal.env:
            value = self.environ.get(goal.env, "").strip()
            if value:
                return value
        return goal.text

    def _owner(self, ctx) -> int | None:
        request = getattr(ctx, "request", None)
        if request is not None:
            return request.scope.get(SCOPE_USER)
        return self.stdio_owner_id

    async def _session(self, ctx) -> _Session:
        """This MCP session's GuardedSession, made at its first guarded request."""
        connection = _connection(ctx)
        owner_id = self._owner(ctx)
        entry: _Session | None = connection.state.get(_STATE_KEY)
        if entry is not None:
            if owner_id != entry.owner_id:
                raise _Unavailable("This session belongs to another Guardian token's user.")
            return entry
        if owner_id is None:
            raise _Unavailable("No Guardian API token of a user allowed to run agents.")
        goal = self._goal(ctx)
        if not goal:
            where = []
            if self.config.goal.header:
                where.append(f"the {self.config.goal.header} header")
            if self.config.goal.env:
                where.append(f"the {self.config.goal.env} environment variable")
            raise _Unavailable(
                "Guardian needs the session's goal: give it in " + " or ".join(where) + "."
            )
        client = ctx.session.client_params
        info = client.client_info if client is not None else None
        guarded = await anyio.to_thread.run_sync(
            _in_django_thread(
                partial(
                    self.session_factory,
                    owner_id=owner_id,
                    tools=tuple(self.catalogue.tools.values()),
                    goal=goal,
                    guardian=self.config.guardian,
                    policy_version=self.config.policy_version,
                    hold_seconds=self.config.hold_seconds,
                    client_name=(info.name if info else "") or "unknown client",
                    client_version=(info.version if info else "") or "",
                    gateway_name=self.config.name,
                    # Only when configured: the bridge's own default otherwise.
                    **({"budgets": dict(self.config.budgets)} if self.config.budgets else {}),
                )
            )
        )
        entry = _Session(guarded=guarded, owner_id=owner_id)
        connection.state[_STATE_KEY] = entry

        async def close() -> None:
            await anyio.to_thread.run_sync(_in_django_thread(guarded.close))

        connection.exit_stack.push_async_callback(close)
        return entry

    # ---- handlers ---------------------------------------------------------------------------

    async def _discover(self, ctx, params) -> types.DiscoverResult:
        return types.DiscoverResult(
            supported_versions=list(HANDSHAKE_PROTOCOL_VERSIONS),
            capabilities=self.server.get_capabilities(),
            instructions=self.server.instructions,
        )

    async def list_tools(self, ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(self.catalogue.listed.values()))

    async def call_tool(self, ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = self.catalogue.tools.get(params.name)
        if tool is None:
            return _tool_error(f"There is no tool {params.name!r} here.")
        try:
            entry = await self._session(ctx)
        except _Unavailable as exc:
            return _tool_error(str(exc))
        upstream = self.upstreams[tool.server]

        def execute(arguments: dict, idempotency_key: str) -> UpstreamReply:
            try:
                return anyio.from_thread.run(
                    upstream.call_tool, tool.upstream_name, arguments, idempotency_key
                )
            except CallLost as lost:
                raise _outcome_unknown()(str(lost)) from lost

        async with entry.lock:
            try:
                reply = await _with_progress(
                    ctx,
                    lambda progress: entry.guarded.call_tool(
                        tool.name, dict(params.arguments or {}), execute=execute, progress=progress
                    ),
                )
            except Exception:
                logger.exception("Guardian failed on a call of %s", tool.name)
                return _tool_error(
                    f"Guardian could not guard this call of {tool.name} (an error on its side, "
                    "logged); it was not run unless the upstream had already been called."
                )
        return tool_result(reply)

    async def list_resources(self, ctx, params) -> types.ListResourcesResult:
        resources: list[types.Resource] = []
        found: dict[str, str] = {}
        for name, upstream in self.upstreams.servers.items():
            for resource in await upstream.list_resources():
                found.setdefault(str(resource.uri), name)
                resources.append(resource)
        self._resources = found
        return types.ListResourcesResult(resources=resources)

    async def list_resource_templates(self, ctx, params) -> types.ListResourceTemplatesResult:
        templates: list[types.ResourceTemplate] = []
        found: list[tuple[str, str]] = []
        for name, upstream in self.upstreams.servers.items():
            for template in await upstream.list_resource_templates():
                found.append((template.uri_template, name))
                templates.append(template)
        self._templates = found
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def _server_of(self, uri: str) -> str | None:
        if uri not in self._resources and not self._templates:
            # A client may read without listing first: learn where things are now.
            await self.list_resources(None, None)
            await self.list_resource_templates(None, None)
        if uri in self._resources:
            return self._resources[uri]
        for template, server in self._templates:
            if template_matches(template, uri):
                return server
        return None

    async def read_resource(
        self, ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        server = await self._server_of(uri)
        if server is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"No upstream serves {uri!r}.")
        try:
            entry = await self._session(ctx)
        except _Unavailable as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=str(exc)) from None
        upstream = self.upstreams[server]

        def fetch() -> UpstreamReply:
            return anyio.from_thread.run(upstream.read_resource, uri)

        async with entry.lock:
            reply = await _with_progress(
                ctx, lambda progress: entry.guarded.read("resource", uri, {}, fetch=fetch)
            )
        if reply.payload is None:
            # Not read, or withheld: Guardian's words in place of the contents.
            words = _words(reply, f"{uri} could not be read.")
            return types.ReadResourceResult(
                contents=[
                    types.TextResourceContents(uri=uri, mime_type="text/plain", text=text)
                    for text in words
                ]
            )
        notices = [
            types.TextResourceContents(uri=uri, mime_type="text/plain", text=notice)
            for notice in reply.notices
        ]
        return reply.payload.model_copy(update={"contents": [*reply.payload.contents, *notices]})

    async def list_prompts(self, ctx, params) -> types.ListPromptsResult:
        found: list[tuple[str, types.Prompt]] = []
        for name, upstream in self.upstreams.servers.items():
            found.extend((name, prompt) for prompt in await upstream.list_prompts())
        fitted = _fit_names([(server, prompt.name) for server, prompt in found])
        self._prompts = fitted
        shown = {value: key for key, value in fitted.items()}
        return types.ListPromptsResult(
            prompts=[
                prompt.model_copy(update={"name": shown[(server, prompt.name)]})
                for server, prompt in found
            ]
        )

    async def get_prompt(self, ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name not in self._prompts:
            await self.list_prompts(None, None)
        where = self._prompts.get(params.name)
        if where is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"No prompt {params.name!r} here.")
        server, name = where
        arguments = dict(params.arguments or {})
        try:
            entry = await self._session(ctx)
        except _Unavailable as exc:
            raise MCPError(code=types.INVALID_REQUEST, message=str(exc)) from None
        upstream = self.upstreams[server]

        def fetch() -> UpstreamReply:
            return anyio.from_thread.run(upstream.get_prompt, name, arguments)

        async with entry.lock:
            reply = await _with_progress(
                ctx,
                lambda progress: entry.guarded.read("prompt", params.name, arguments, fetch=fetch),
            )
        if reply.payload is None:
            words = _words(reply, f"The prompt {params.name} could not be given.")
            return types.GetPromptResult(
                messages=[
                    types.PromptMessage(role="user", content=types.TextContent(text=text))
                    for text in words
                ]
            )
        notices = [
            types.PromptMessage(role="user", content=types.TextContent(text=notice))
            for notice in reply.notices
        ]
        return reply.payload.model_copy(update={"messages": [*reply.payload.messages, *notices]})

    # ---- serving ----------------------------------------------------------------------------

    async def serve_streams(self, read_stream, write_stream) -> None:
        """Serve one client over a stream pair (stdio's) until it closes them."""
        async with self.server.lifespan(self.server) as state:
            await serve_loop(
                self.server,
                read_stream,
                write_stream,
                lifespan_state=state,
                init_options=self.server.create_initialization_options(),
            )

    def http_app(self, resolve_token: Callable[[str], int | None], *, host: str = ""):
        """The Streamable HTTP app (stateful sessions), every request checked for
        `Authorization: Bearer <Guardian API token>` of a user allowed to run agents."""
        http = self.config.http
        app = self.server.streamable_http_app(
            streamable_http_path=http.path, host=host or http.host, session_idle_timeout=None
        )
        return BearerGate(app, resolve_token)


async def run_stdio(config: GatewayConfig, *, owner_id: int, **options: Any) -> None:
    """The gateway over this process's stdin and stdout: the client that started it is the
    one session. The protocol owns stdout from the start (the SDK diverts fd 1 to stderr while
    it serves), so nothing the upstreams or Django print can reach the client's wire."""
    async with stdio_server() as (read_stream, write_stream), Upstreams(config.servers) as ups:
        gateway = Gateway(config, ups, await ups.list_tools(), stdio_owner_id=owner_id, **options)
        logger.info(
            "MCP gateway %s serving %d tools of %d servers over stdio",
            config.name,
            len(gateway.catalogue.tools),
            len(config.servers),
        )
        await gateway.serve_streams(read_stream, write_stream)


async def run_http(
    config: GatewayConfig,
    *,
    host: str,
    port: int,
    resolve_token: Callable[[str], int | None],
    **options: Any,
) -> None:
    """The gateway over Streamable HTTP on host:port, until SIGINT or SIGTERM."""
    import uvicorn

    async with Upstreams(config.servers) as ups:
        gateway = Gateway(config, ups, await ups.list_tools(), **options)
        app = gateway.http_app(resolve_token, host=host)
        logger.info(
            "MCP gateway %s serving %d tools of %d servers on http://%s:%d%s",
            config.name,
            len(gateway.catalogue.tools),
            len(config.servers),
            host,
            port,
            config.http.path,
        )
        server = uvicorn.Server(
            uvicorn.Config(app, host=host, port=port, log_config=None, lifespan="on")
        )
        await server.serve()


def _connection(ctx):
    # The SDK keeps the per-connection state (and its teardown stack) on the Connection, which
    # the request's ServerSession holds; 2.3 has no public accessor for it from a lowlevel
    # handler (its own Context.connection is not built by the runner yet).
    return ctx.session._connection


async def _handshake_era_only(ctx, call_next):
    """Refuse the 2026 per-request era (no session, so no run) with words that say why."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and ctx.method not in (
        "server/discover",
        "ping",
    ):
        raise MCPError(
            code=types.INVALID_REQUEST,
            message=(
                "The Guardian MCP gateway serves MCP sessions (the initialize handshake, "
                f"versions {', '.join(HANDSHAKE_PROTOCOL_VERSIONS)}): a session is one guarded run."
            ),
        )
    return await call_next(ctx)


def _in_django_thread(function: Callable[[], Any]) -> Callable[[], Any]:
    """`function` run in a worker thread as Django code: a connection the database dropped
    while the thread idled is replaced, none is left open for nobody."""

    def run() -> Any:
        from django.db import close_old_connections

        close_old_connections()
        try:
            return function()
        finally:
            close_old_connections()

    return run


async def _with_progress(ctx, work: Callable[[Callable[[str], None]], Any]) -> Any:
    """Run `work(progress)` in a worker thread. While it runs, each progress(message) it
    reports reaches the client as an MCP progress notification (when the request carried a
    progressToken), and the last one is repeated every few seconds while the call is held."""
    state = {"count": 0, "message": None, "sent": 0.0}

    async def send(message: str) -> None:
        state["count"] += 1
        state["message"] = message
        state["sent"] = time.monotonic()
        try:
            await ctx.session.report_progress(float(state["count"]), None, message)
        except Exception as exc:  # a client gone mid-call must not fail the call
            logger.debug("progress notification not sent: %s", exc)

    def progress(message: str) -> None:
        anyio.from_thread.run(send, message)

    async def heartbeat() -> None:
        while True:
            await anyio.sleep(0.5)
            if state["message"] and time.monotonic() - state["sent"] >= PROGRESS_EVERY_SECONDS:
                await send(state["message"])

    result, error = None, None
    async with anyio.create_task_group() as group:
        group.start_soon(heartbeat)
        try:
            result = await anyio.to_thread.run_sync(_in_django_thread(partial(work, progress)))
        except Exception as exc:  # raised as itself below, not inside a task group's group
            error = exc
        finally:
            group.cancel_scope.cancel()
    if error is not None:
        raise error
    return result


def _words(reply, fallback: str) -> list[str]:
    """What the client reads in place of contents Guardian did not hand on."""
    return [text for text in (reply.error, *reply.notices) if text] or [fallback]


def _tool_error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def tool_result(reply) -> types.CallToolResult:
    """A GuardedReply as the client's CallToolResult: the upstream's reply as is, with
    Guardian's notices appended as text; an error or a withheld output is a tool error (the
    model reads why; a declared output schema is not expected of it)."""
    notices = [types.TextContent(text=notice) for notice in reply.notices]
    if reply.error:
        return types.CallToolResult(
            content=[types.TextContent(text=reply.error), *notices], is_error=True
        )
    if reply.payload is None:
        return types.CallToolResult(content=notices, is_error=True)
    payload: types.CallToolResult = reply.payload
    return payload.model_copy(update={"content": [*payload.content, *notices]})


# A token found good is taken again without asking the database for this long: a revoked
# token, or a user whose rights were taken away, is refused at most this much later. Every
# request of a session carries its token; checking it in the database each time cost about
# 6 ms a call (four statements and a thread hop).
TOKEN_RECHECK_SECONDS = 10.0


class BearerGate:
    """ASGI: every HTTP request carries `Authorization: Bearer <token>` of a user allowed to
    run agents (401 otherwise); that user's id travels in the scope to the handlers."""

    def __init__(
        self,
        app,
        resolve_token: Callable[[str], int | None],
        *,
        recheck_seconds: float = TOKEN_RECHECK_SECONDS,
    ) -> None:
        self.app = app
        self.resolve_token = resolve_token
        self.recheck_seconds = recheck_seconds
        # sha256 of a token found good → (its user's id, when it was checked). Only good
        # tokens are kept: a bad one is asked of the database every time.
        self._good: dict[str, tuple[int, float]] = {}

    async def _user_of(self, token: str) -> int | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        known = self._good.get(key)
        now = time.monotonic()
        if known is not None and now - known[1] < self.recheck_seconds:
            return known[0]
        user_id = await anyio.to_thread.run_sync(
            _in_django_thread(partial(self.resolve_token, token))
        )
        if user_id is None:
            self._good.pop(key, None)
        else:
            if len(self._good) > 10_000:  # tokens come and go: never grow without end
                self._good.clear()
            self._good[key] = (user_id, now)
        return user_id

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {key.lower(): value for key, value in scope.get("headers", [])}
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        user_id = None
        if scheme.lower() == "bearer" and token.strip():
            user_id = await self._user_of(token.strip())
        if user_id is None:
            await _unauthorized(send)
            return
        scope[SCOPE_USER] = user_id
        await self.app(scope, receive, send)


async def _unauthorized(send) -> None:
    body = (
        b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": '
        b'"Authorization: give Bearer <token>, a Guardian API token of a user allowed to '
        b'run agents."}}'
    )
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="guardian"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


__all__ = ["CLIENT_NAME", "BearerGate", "Catalogue", "Gateway", "catalogue", "tool_result"]
