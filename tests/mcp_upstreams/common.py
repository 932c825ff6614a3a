"""What the test upstreams share: the execution ledger and the command line (stdio or HTTP)."""

import argparse
import json
import os
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

IDEMPOTENCY_META_KEY = "guardian/idempotency-key"


def idempotency_key(ctx: Context | None) -> str | None:
    """The request's `_meta` idempotency key, when the caller sent one."""
    if ctx is None:
        return None
    try:
        meta = ctx.request_context.meta
    except ValueError:  # no request context (called outside a request)
        return None
    if not meta:
        return None
    value = meta.get(IDEMPOTENCY_META_KEY)
    return None if value is None else str(value)


def record(
    server: str, tool: str, arguments: dict[str, Any], ctx: Context | None, phase: str = "run"
) -> None:
    """Append one line to the ledger (MCP_UPSTREAM_LEDGER), if one is named.

    One write of one line with O_APPEND: lines from concurrent calls do not interleave.
    """
    path = os.environ.get("MCP_UPSTREAM_LEDGER")
    if not path:
        return
    line = json.dumps(
        {
            "server": server,
            "tool": tool,
            "arguments": arguments,
            "idempotency_key": idempotency_key(ctx),
            "phase": phase,
            "time": time.time(),
            "pid": os.getpid(),
        },
        sort_keys=True,
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def main(server: MCPServer, argv: list[str] | None = None) -> None:
    """`--transport stdio` (default) or `--transport http --port N` on 127.0.0.1 (path /mcp)."""
    parser = argparse.ArgumentParser(prog=f"python -m tests.mcp_upstreams.{server.name}")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)
