"""Starting the test upstreams from a test or the bench: stdio parameters for the SDK's client,
and an HTTP server in a child process on a free port of 127.0.0.1."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from mcp.client.stdio import StdioServerParameters

REPO = Path(__file__).resolve().parent.parent.parent
SERVERS = ("shop", "crm")


def _env(ledger: Path | str | None, release: Path | str | None) -> dict[str, str]:
    env = {}
    if ledger is not None:
        env["MCP_UPSTREAM_LEDGER"] = str(ledger)
    if release is not None:
        env["MCP_UPSTREAM_RELEASE"] = str(release)
    return env


def command(name: str, *transport: str) -> list[str]:
    """The command line that runs upstream `name` (from the repository's root)."""
    if name not in SERVERS:
        raise ValueError(f"no test upstream {name!r}; there are {SERVERS}")
    return [sys.executable, "-m", f"tests.mcp_upstreams.{name}", *transport]


def stdio_params(
    name: str, *, ledger: Path | str | None = None, release: Path | str | None = None
) -> StdioServerParameters:
    """How the SDK's client starts upstream `name` over stdio."""
    argv = command(name, "--transport", "stdio")
    return StdioServerParameters(
        command=argv[0], args=argv[1:], cwd=str(REPO), env=_env(ledger, release)
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the upstream exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listened on 127.0.0.1:{port} within {timeout:.0f} s")


@contextlib.contextmanager
def http_server(
    name: str,
    *,
    ledger: Path | str | None = None,
    release: Path | str | None = None,
    port: int | None = None,
) -> Iterator[str]:
    """Run upstream `name` over Streamable HTTP in a child process; yields its URL (…/mcp)."""
    port = port or free_port()
    process = subprocess.Popen(
        command(name, "--transport", "http", "--port", str(port)),
        cwd=REPO,
        env={**os.environ, **_env(ledger, release)},
        stdout=subprocess.DEVNULL,  # its errors go to stderr, shown with a failing test
    )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
