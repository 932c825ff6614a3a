"""`make bench`: what the MCP gateway adds to each tool call (issue 27: at most 10 ms median for a
read-only call on this machine).

With the SDK's own client, BENCH_MCP_CALLS (default 300) read-only `lookup_order` calls, after
a warm-up, in each of BENCH_MCP_PASSES passes (default 3, fresh processes and sessions each):
- directly to the test upstream `shop` (tests/mcp_upstreams) over stdio, and through the
  gateway (`manage.py mcp_gateway --config <toml> --transport stdio`) whose upstream is the
  same shop over stdio;
- the same over Streamable HTTP: the shop on 127.0.0.1, and the gateway on 127.0.0.1 in front
  of it;
- the first call of a fresh gateway process's session against its second
  (BENCH_MCP_FIRST_CALLS processes, default 3).
Both with the initialize handshake (a session: the gateway's run lives in it), the shop asked
the same way as the like-for-like baseline. Direct and gateway calls alternate in blocks of
BENCH_MCP_BLOCK (25) within a session, both sessions open, so a busy neighbour on this shared
machine slows both alike. Reported: the median and p95 of each, and the added latency (the
gateway's median minus the direct median, p95 likewise), with the per-pass added medians.

The gateway runs on the configured database (migrated first) as a bench integrator of its own
with a fresh API token, the guardian "local" and the active policy version; an MCP session is
one Guardian run (given room for the pass's calls in the config's [budgets]; a gateway whose
config takes no budgets gets sessions that fit the default turn cap), cancelled at the end if
still running. Without the gateway (no `mcp_gateway` command) only the direct calls are
measured and the section says so. The gateway's logs: $GUARDIAN_VAR_DIR/bench/mcp-gateway-*.log.
Run alone: .venv/bin/python -m bench.mcp_gateway
"""

import contextlib
import math
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command, get_commands  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

from bench.report import Report  # noqa: E402
from tests.mcp_upstreams.launch import (  # noqa: E402
    command as upstream_command,
)
from tests.mcp_upstreams.launch import (  # noqa: E402
    free_port,
    http_server,
    stdio_params,
    wait_for_port,
)

CALLS = int(os.environ.get("BENCH_MCP_CALLS", "300"))
PASSES = int(os.environ.get("BENCH_MCP_PASSES", "3"))
BLOCK = int(os.environ.get("BENCH_MCP_BLOCK", "25"))
WARMUP = 20
# Fresh gateway processes whose first call is timed (each starts Django and the upstream).
FIRST_CALL_PROCESSES = int(os.environ.get("BENCH_MCP_FIRST_CALLS", "3"))
TARGET_MS = 10.0
# The goal of every run this section makes (by which its runs are found and ended).
GOAL = "bench: look up the orders the customer names and report their status"
TOKEN_ENV = "GUARDIAN_BENCH_MCP_TOKEN"
TOOL = "lookup_order"
REPO = Path(__file__).resolve().parent.parent


def gateway_built() -> bool:
    """The gateway's command exists (mcp_gateway installed, helper branch merged)."""
    return "mcp_gateway" in get_commands()


def p95(values: list[float]) -> float:
    """The 95th percentile, nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


# --- The gateway: its config, its environment, how it is started ---------------------------


def _integrator_token() -> str:
    """A fresh API token of a bench integrator nobody can sign in as (runs.add_run)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from guardian_core.services import api_token_create

    user, created = get_user_model().objects.get_or_create(username="bench-mcp-gateway")
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    user.groups.add(Group.objects.get(name="integrator"))
    _, secret = api_token_create(user=user, name=f"bench mcp {secrets.token_hex(4)}")
    return secret


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def gateway_config(
    *,
    policy_version: int,
    upstream: list[str] | str,
    http_port: int | None = None,
    max_turns: int | None = None,
) -> str:
    """The gateway's TOML (mcp_gateway/config.py): one upstream `shop`, by its stdio command
    line (run from the repository) or its URL; served on 127.0.0.1:`http_port` over HTTP."""
    if isinstance(upstream, str):
        where = [f"url = {_toml_string(upstream)}"]
    else:
        where = [
            f"command = [{', '.join(_toml_string(part) for part in upstream)}]",
            f"cwd = {_toml_string(str(REPO))}",
        ]
    http = []
    if http_port is not None:
        http = ["", "[http]", 'host = "127.0.0.1"', f"port = {http_port}", 'path = "/mcp"']
    budgets = [] if max_turns is None else ["", "[budgets]", f"max_turns = {max_turns}"]
    return "\n".join(
        [
            'name = "bench-gateway"',
            f"token_env = {_toml_string(TOKEN_ENV)}",
            'guardian = "local"',
            f"policy_version = {policy_version}",
            "hold_seconds = 5",
            *http,
            *budgets,
            "",
            "[goal]",
            f"text = {_toml_string(GOAL)}",
            "",
            "[[servers]]",
            'name = "shop"',
            *where,
            "",
        ]
    )


def _gateway_env(secret: str) -> dict[str, str]:
    """This process's environment (the same database and broker) with the token in it."""
    return {**os.environ, TOKEN_ENV: secret}


def _gateway_argv(config: Path, *transport: str) -> list[str]:
    return [sys.executable, "manage.py", "mcp_gateway", "--config", str(config), *transport]


def _log(name: str):
    path = Path(settings.VAR_DIR) / "bench" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a")


@contextlib.contextmanager
def _gateway_http(config: Path, port: int, secret: str) -> Iterator[str]:
    """The gateway over Streamable HTTP on 127.0.0.1:`port`, as its config says; yields its
    URL."""
    with _log("mcp-gateway-http.log") as log:
        process = subprocess.Popen(
            _gateway_argv(config, "--transport", "http"),
            cwd=REPO,
            env=_gateway_env(secret),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, process, timeout=60)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator:
    """The SDK's Streamable HTTP transport with these headers on every request (the gateway
    takes its Guardian token as a bearer token); the direct calls use the same, without it."""
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


# --- Timing ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _session(target) -> AsyncIterator[tuple[Client, str]]:
    """An SDK client session and the name under which it lists lookup_order. Both sides with
    the initialize handshake (the gateway needs a session for its run; the shop, asked the
    same way, is the like-for-like baseline), no client cache."""
    async with Client(target, mode="legacy", cache=None) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        found = [name for name in names if name == TOOL or name.endswith(TOOL)]
        if not found:
            raise SystemExit(f"no {TOOL} among the tools listed: {names}")
        yield client, found[0]


async def _timed(client: Client, tool: str, indices: range) -> list[float]:
    times = []
    for index in indices:
        start = time.perf_counter()
        result = await client.call_tool(tool, {"order_id": f"ord_{index:05d}"})
        times.append((time.perf_counter() - start) * 1000)
        if result.is_error:
            text = " ".join(getattr(block, "text", "") for block in result.content)
            raise SystemExit(f"{tool} call {index} answered an error: {text[:300]}")
    return times


async def _pass(
    targets: Callable[[], dict[str, object]], per_session: int, warmup: int
) -> dict[str, list[float]]:
    """One pass: CALLS calls per target ({label: [ms per call]}), in sessions of at most
    `per_session` calls after `warmup` untimed ones; within a session every target's calls
    alternate in blocks of BLOCK. `targets()` makes a fresh set of transports per session."""
    times: dict[str, list[float]] = {}
    order = 0  # order ids never repeat within a pass: a repeated call is a guard of its own
    for first in range(0, CALLS, per_session):
        async with contextlib.AsyncExitStack() as stack:
            sessions = {
                label: await stack.enter_async_context(_session(target))
                for label, target in targets().items()
            }
            for client, tool in sessions.values():
                await _timed(client, tool, range(order, order + warmup))
            order += warmup
            for start in range(first, min(CALLS, first + per_session), BLOCK):
                size = min(BLOCK, CALLS - start, first + per_session - start)
                for label, (client, tool) in sessions.items():
                    times.setdefault(label, []).extend(
                        await _timed(client, tool, range(order, order + size))
                    )
                order += size
    return times


def _session_size() -> tuple[int, int, str, int | None]:
    """(timed calls per session, warm-up calls per session, a note, the turn cap to configure):
    all CALLS in one session when the gateway's config takes budgets (the bench gives its runs
    room), else as many as fit under the runs' default turn cap, in several sessions."""
    from mcp_gateway.config import SCHEMA

    if "budgets" in SCHEMA["properties"]:
        return CALLS, WARMUP, "", WARMUP + CALLS + 10
    from guardian_core.engine.thresholds import Budgets

    cap = Budgets().max_turns
    warmup = max(1, cap // 5)
    per_session = cap - warmup - 1
    return (
        per_session,
        warmup,
        f"the gateway's config takes no budgets, so each run stops at the default turn cap "
        f"({cap}): sessions of {warmup} warm-up + {per_session} timed calls",
        None,
    )


@contextlib.contextmanager
def _stdio_targets(config: Path | None, secret: str) -> Iterator[Callable[[], dict[str, object]]]:
    """A maker of fresh stdio transports: the shop directly, and the gateway (when `config`)."""
    with _log("mcp-gateway-stdio.log") as log:

        def targets() -> dict[str, object]:
            made: dict[str, object] = {"direct": stdio_params("shop")}
            if config is not None:
                argv = _gateway_argv(config, "--transport", "stdio")
                params = StdioServerParameters(
                    command=argv[0], args=argv[1:], cwd=str(REPO), env=_gateway_env(secret)
                )
                # The gateway's own stderr (Django's logs) into a file, not between the figures.
                made["through the gateway"] = stdio_client(params, errlog=log)
            return made

        yield targets


async def _first_calls(params: StdioServerParameters) -> tuple[float, float]:
    """(ms for the first call of a fresh gateway process's session, ms for its second): the
    gateway starts, the client's handshake and tools/list are done, then the two calls."""
    async with Client(stdio_client(params[0], errlog=params[1]), mode="legacy", cache=None) as c:
        await c.list_tools()
        times = await _timed(c, TOOL, range(2))
    return times[0], times[1]


def _measure_first_call(report: Report, config: Path, secret: str) -> dict[str, float]:
    """The first call of a gateway process, FIRST_CALL_PROCESSES times: what it loads at start
    (the guardian's model, the URLs) no call waits for."""
    firsts, seconds = [], []
    with _log("mcp-gateway-first-call.log") as log:
        for _ in range(FIRST_CALL_PROCESSES):
            argv = _gateway_argv(config, "--transport", "stdio")
            params = StdioServerParameters(
                command=argv[0], args=argv[1:], cwd=str(REPO), env=_gateway_env(secret)
            )
            first, second = anyio.run(_first_calls, (params, log))
            firsts.append(first)
            seconds.append(second)
    figures = {
        "stdio, first call of a gateway process, median": statistics.median(firsts),
        "stdio, its second call, median": statistics.median(seconds),
    }
    spread = " / ".join(f"{ms:.0f}" for ms in sorted(firsts))
    report.add(
        "stdio, first call of a gateway process, median",
        figures["stdio, first call of a gateway process, median"],
        "ms",
        extra=f"{FIRST_CALL_PROCESSES} processes: {spread}",
    )
    report.add("stdio, its second call, median", figures["stdio, its second call, median"], "ms")
    return figures


def _measure_transport(
    report: Report, transport: str, passes: list[dict[str, list[float]]], *, one_run: bool
) -> dict[str, float]:
    """Every figure of one transport; `one_run`: each pass was one session (one run), so its
    first and last tenth say whether a call costs more as the run grows."""
    figures: dict[str, float] = {}
    every = {label: [ms for one in passes for ms in one[label]] for label in passes[0]}
    for label, times in every.items():
        figures[f"{transport}, {label}, median"] = statistics.median(times)
        figures[f"{transport}, {label}, p95"] = p95(times)
        report.add(f"{transport}, {label}, median", statistics.median(times), "ms")
        report.add(f"{transport}, {label}, p95", p95(times), "ms", extra=f"{len(times)} calls")
    if "through the gateway" in every:
        per_pass = sorted(
            statistics.median(one["through the gateway"]) - statistics.median(one["direct"])
            for one in passes
        )
        added = (
            figures[f"{transport}, through the gateway, median"]
            - figures[f"{transport}, direct, median"]
        )
        added_p95 = (
            figures[f"{transport}, through the gateway, p95"] - figures[f"{transport}, direct, p95"]
        )
        figures[f"{transport}, added by the gateway, median"] = added
        figures[f"{transport}, added by the gateway, p95"] = added_p95
        spread = " / ".join(f"{ms:.2f}" for ms in per_pass)
        verdict = "within" if added <= TARGET_MS else "OVER"
        report.add(
            f"{transport}, added by the gateway, median",
            added,
            "ms",
            extra=f"target ≤ {TARGET_MS:.0f} ms: {verdict}; per pass {spread}",
        )
        report.add(f"{transport}, added by the gateway, p95", added_p95, "ms")
        if one_run:
            width = max(10, CALLS // 10)
            windows = {
                f"calls 1-{width}": slice(0, width),
                f"calls {CALLS - width + 1}-{CALLS}": slice(CALLS - width, CALLS),
            }
            for window, part in windows.items():
                name = f"{transport}, added, {window} of the run"
                figures[name] = statistics.median(
                    statistics.median(one["through the gateway"][part])
                    - statistics.median(one["direct"][part])
                    for one in passes
                )
                report.add(name, figures[name], "ms", extra="median of the passes")
    return figures


def measure(report: Report) -> dict[str, float]:
    """Report and return every figure ({name: ms})."""
    import logging

    for noisy in ("httpx", "httpx2", "mcp"):  # a line per request otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if CALLS < 20 or PASSES < 1 or BLOCK < 1:
        raise SystemExit("BENCH_MCP_CALLS must be at least 20, BENCH_MCP_PASSES and _BLOCK >= 1")
    through = gateway_built()
    secret, policy_number = "", 0
    if through:
        from demo.setup import demo_policy_version

        call_command("migrate", verbosity=0)
        policy_number = demo_policy_version().number
        secret = _integrator_token()
    else:
        report.note("the gateway (manage.py mcp_gateway) is not built yet: direct calls only")
    per_session, warmup, sizing, max_turns = (
        _session_size() if through else (CALLS, WARMUP, "", None)
    )
    report.note(
        f"{CALLS} read-only {TOOL} calls per pass after {warmup} warm-up, {PASSES} passes, "
        f"alternating in blocks of {BLOCK}; SDK client, test upstream shop"
    )
    if sizing:
        report.note(sizing)
    figures: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-mcp-") as tmp:
            stdio_config = http_config = None
            if through:
                stdio_config, http_config = Path(tmp, "stdio.toml"), Path(tmp, "http.toml")
                stdio_config.write_text(
                    gateway_config(
                        policy_version=policy_number,
                        upstream=upstream_command("shop", "--transport", "stdio"),
                        max_turns=max_turns,
                    )
                )
            passes = []
            for _ in range(PASSES):
                with _stdio_targets(stdio_config, secret) as targets:
                    passes.append(anyio.run(_pass, targets, per_session, warmup))
            one_run = per_session >= CALLS
            figures |= _measure_transport(report, "stdio", passes, one_run=one_run)
            if through:
                figures |= _measure_first_call(report, stdio_config, secret)

            passes = []
            for _ in range(PASSES):
                with http_server("shop") as shop_url, contextlib.ExitStack() as stack:
                    urls = {"direct": (shop_url, {})}
                    if through:
                        port = free_port()
                        http_config.write_text(
                            gateway_config(
                                policy_version=policy_number,
                                upstream=shop_url,
                                http_port=port,
                                max_turns=max_turns,
                            )
                        )
                        gateway_url = stack.enter_context(_gateway_http(http_config, port, secret))
                        bearer = {"Authorization": f"Bearer {secret}"}
                        urls["through the gateway"] = (gateway_url, bearer)

                    def targets(urls=urls) -> dict[str, object]:
                        return {label: _http_transport(*where) for label, where in urls.items()}

                    passes.append(anyio.run(_pass, targets, per_session, warmup))
            figures |= _measure_transport(report, "HTTP", passes, one_run=one_run)
    finally:
        if through:
            from runs.models import Run, RunStatus

            # The bench's runs are ended, so no sweeper takes an unfinished step to a person.
            Run.objects.filter(goal=GOAL, status=RunStatus.RUNNING).update(
                status=RunStatus.CANCELLED
            )
    return figures


def main() -> None:
    report = Report("mcp gateway")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
