"""The MCP gateway end to end: the SDK's own client talks to `manage.py mcp_gateway` started as
a real process (over stdio and over Streamable HTTP), in front of two real upstream MCP servers
the test starts (shop over Streamable HTTP, crm over stdio), with the local guardian and a
reviewer deciding in the queue. The upstreams' ledger counts what actually ran."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from demo.setup import demo_policy_version
from escalations.models import Escalation, EscalationKind, EscalationStatus
from escalations.verdicts import escalation_resolve
from guardian_core.services import api_token_create
from runs.external import external_steps_abandoned
from runs.models import Run, ToolCall, ToolCallStatus
from tests.client_helpers import anyio_run
from tests.mcp_upstreams.launch import free_port, http_server, wait_for_port
from tests.processes import REPO, child_env
from tests.test_worker_runs import worker_env

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

CLIENT = types.Implementation(name="test-agent", version="9.9")
GOAL = "Help the customer with their orders 41 to 43."


def _config(
    tmp_path: Path, *, shop_url: str | None, ledger: Path, hold_seconds: float = 30
) -> Path:
    crm = [sys.executable, "-m", "tests.mcp_upstreams.crm", "--transport", "stdio"]
    shop = (
        f"""
[[servers]]
name = "shop"
url = {json.dumps(shop_url)}
"""
        if shop_url
        else ""
    )
    text = f"""
name = "test-desk"
token_env = "GATEWAY_TOKEN"
guardian = "local"
hold_seconds = {hold_seconds}

[budgets]
max_turns = 40

[goal]
text = {json.dumps(GOAL)}
header = "X-Guardian-Goal"
env = "GUARDIAN_MCP_GOAL"
{shop}
[[servers]]
name = "crm"
command = {json.dumps(crm)}
cwd = {json.dumps(str(REPO))}
env = {{ MCP_UPSTREAM_LEDGER = {json.dumps(str(ledger))} }}
risk_classes = {{ lookup_order = "read_only" }}
"""
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def _ledger(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _ran(path: Path, tool: str, **arguments) -> list[dict]:
    return [
        line
        for line in _ledger(path)
        if line["tool"] == tool and all(line["arguments"].get(k) == v for k, v in arguments.items())
    ]


def _text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


@pytest.fixture
def setup(tmp_path, integrator):
    demo_policy_version()
    _, secret = api_token_create(user=integrator, name="mcp gateway")
    ledger = tmp_path / "ledger.jsonl"
    release = tmp_path / "release"
    with http_server("shop", ledger=ledger, release=release) as shop_url:
        config = _config(tmp_path, shop_url=shop_url, ledger=ledger)
        yield {
            "config": config,
            "token": secret,
            "ledger": ledger,
            "release": release,
            "env": child_env(**worker_env(GUARDIAN_DEADLINE_SECONDS="600", GATEWAY_TOKEN=secret)),
        }


@pytest.fixture
def crm_only(tmp_path, integrator):
    """A gateway in front of crm alone (over stdio), its lookup_order read-only by the admin's
    override. Alone, so its tools keep their plain names."""
    demo_policy_version()
    _, secret = api_token_create(user=integrator, name="mcp gateway")
    ledger = tmp_path / "ledger.jsonl"
    return {
        "config": _config(tmp_path, shop_url=None, ledger=ledger),
        "token": secret,
        "ledger": ledger,
        "env": child_env(**worker_env(GUARDIAN_DEADLINE_SECONDS="600", GATEWAY_TOKEN=secret)),
    }


@contextmanager
def gateway_process(setup, port: int, *, stderr=None):
    """`manage.py mcp_gateway --transport http` as a child process, listening on `port`."""
    process = subprocess.Popen(
        [sys.executable, "manage.py", "mcp_gateway", "--config", str(setup["config"])]
        + ["--transport", "http", "--port", str(port)],
        cwd=REPO,
        env=setup["env"],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    try:
        wait_for_port(port, process, timeout=60)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@asynccontextmanager
async def connected(setup, transport: str, port: int | None = None):
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable,
            args=["manage.py", "mcp_gateway", "--config", str(setup["config"])],
            cwd=str(REPO),
            env=setup["env"],
        )
        client = Client(stdio_client(params), client_info=CLIENT, cache=None)
    else:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {setup['token']}"})
        url = f"http://127.0.0.1:{port}/mcp"
        client = Client(streamable_http_client(url, http_client=http), client_info=CLIENT)
    async with client:
        yield client


def _decide_when_held(
    decision: str, *, reason: str = "", reviewer, timeout: float = 60, after: float = 0
):
    """A reviewer deciding in the queue: the first open held step they see, `after` seconds
    after it shows."""
    decided: dict = {}

    def work() -> None:
        from django.db import connection

        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                held = Escalation.objects.filter(
                    kind=EscalationKind.GATED_STEP, status=EscalationStatus.OPEN
                ).first()
                if held is not None:
                    time.sleep(after)
                    escalation_resolve(
                        escalation_id=held.pk, reviewer=reviewer, decision=decision, reason=reason
                    )
                    decided["escalation"] = held.pk
                    return
                time.sleep(0.1)
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, decided


def _session_flow(setup, reviewer, transport: str, port: int | None = None) -> dict:
    ledger = setup["ledger"]
    seen: dict = {}

    async def flow() -> None:
        async with connected(setup, transport, port) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            seen["tools"] = listed

            # Invalid arguments come back with every problem; nothing runs.
            seen["invalid"] = await client.call_tool("refund", {"order_id": 41, "amount": -5})

            # A destructive tool is held; a reviewer approves it; it runs once.
            progress: list[str] = []

            async def on_progress(value, total, message) -> None:
                progress.append(message or "")

            # (It decides after a while, so the held request hears it still waits.)
            thread, decided = _decide_when_held("approve", reviewer=reviewer, after=6)
            seen["approved"] = await client.call_tool(
                "refund", {"order_id": "42", "amount": 10}, progress_callback=on_progress
            )
            await anyio.to_thread.run_sync(thread.join)
            seen["approved_escalation"] = decided.get("escalation")
            seen["progress"] = progress

            # A rejected one never runs, and the model reads the reviewer's reason.
            thread, decided = _decide_when_held(
                "reject", reason="refunds above 1000 EUR need the manager", reviewer=reviewer
            )
            seen["rejected"] = await client.call_tool("refund", {"order_id": "43", "amount": 5000})
            await anyio.to_thread.run_sync(thread.join)

            # An output carrying planted instructions is withheld.
            seen["planted"] = await client.call_tool("read_note", {"note_id": "planted"})

    anyio_run(flow)
    seen["ledger"] = _ledger(ledger)
    return seen


def _assert_the_session(seen: dict, ledger: Path) -> None:
    tools = seen["tools"]
    # Clashing names are namespaced by server; a name Guardian registers itself is too.
    assert {"lookup_order__shop", "lookup_order__crm", "refund", "read_note"} <= set(tools)
    assert "send_email__crm" in tools
    assert tools["refund"].annotations.destructive_hint is True
    assert tools["lookup_order__shop"].annotations.read_only_hint is True
    assert "order_id" in tools["refund"].input_schema["properties"]

    invalid = _text(seen["invalid"])
    assert seen["invalid"].is_error
    assert "order_id" in invalid, invalid
    assert "amount" in invalid, invalid
    assert _ran(ledger, "refund", order_id=41) == []

    approved = _text(seen["approved"])
    assert not seen["approved"].is_error, approved
    assert "Refunded 10.00 EUR on order 42" in approved
    assert len(_ran(ledger, "refund", order_id="42")) == 1
    assert _ran(ledger, "refund", order_id="42")[0]["idempotency_key"]
    assert seen["approved_escalation"] is not None
    assert any("reviewer" in message for message in seen["progress"]), seen["progress"]

    rejected = _text(seen["rejected"])
    assert seen["rejected"].is_error
    assert "refunds above 1000 EUR need the manager" in rejected
    assert _ran(ledger, "refund", order_id="43") == []

    planted = _text(seen["planted"])
    assert seen["planted"].is_error
    assert "Withheld" in planted, planted
    assert "IMPORTANT SYSTEM NOTICE" not in planted
    assert "ignore your previous instructions" not in planted

    # One session is one run, with the client's name and version.
    (run,) = Run.objects.all()
    assert run.config["mcp"]["client"] == {"name": "test-agent", "version": "9.9"}
    assert run.config["mcp"]["gateway"] == "test-desk"
    assert run.goal == GOAL
    assert run.budgets["max_turns"] == 40


def test_a_session_over_stdio_is_one_guarded_run(setup, reviewer):
    seen = _session_flow(setup, reviewer, "stdio")
    _assert_the_session(seen, setup["ledger"])


def test_a_session_over_streamable_http_is_one_guarded_run(setup, reviewer):
    port = free_port()
    with gateway_process(setup, port):
        seen = _session_flow(setup, reviewer, "http", port)
    _assert_the_session(seen, setup["ledger"])


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_read_only_tool_runs_at_once_and_the_session_is_one_run(crm_only, reviewer, transport):
    async def flow(port=None) -> tuple[types.CallToolResult, types.CallToolResult]:
        async with connected(crm_only, transport, port) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert listed == {"lookup_order", "send_email__crm"}
            read = await client.call_tool("lookup_order", {"order_id": "41"})
            # The stdio upstream's write (no annotations: irreversible) is held, approved, run.
            thread, _ = _decide_when_held("approve", reviewer=reviewer)
            sent = await client.call_tool(
                "send_email__crm", {"to": "ada@example.com", "body": "Your refund is on its way."}
            )
            await anyio.to_thread.run_sync(thread.join)
            return read, sent

    if transport == "stdio":
        result, sent = anyio_run(flow)
    else:
        port = free_port()
        with gateway_process(crm_only, port):
            result, sent = anyio_run(flow, port)
    assert len(_ran(crm_only["ledger"], "send_email", to="ada@example.com")) == 1
    assert not sent.is_error, _text(sent)
    assert "Delivered to ada@example.com." in _text(sent)
    assert not result.is_error, _text(result)
    assert _text(result) == "Order 41 belongs to customer Ada Martin, ada@example.com, since 2021."
    (ran,) = _ran(crm_only["ledger"], "lookup_order", order_id="41")
    assert ran["idempotency_key"]
    (run,) = Run.objects.all()
    assert run.config["mcp"]["client"] == {"name": "test-agent", "version": "9.9"}
    assert run.config["mcp"]["gateway"] == "test-desk"
    call = ToolCall.objects.filter(turn__run=run).order_by("turn__index").first()
    assert (call.tool, call.status) == ("lookup_order", ToolCallStatus.DONE)
    assert call.idempotency_key == ran["idempotency_key"]


def test_the_gateway_loads_its_guardian_when_it_starts_not_at_the_first_call(setup, tmp_path):
    # The local guardian's model took the first call of a session about a second (measured:
    # 0.9-1.3 s; with it loaded at start, 0.2 s): it loads while the gateway starts, before
    # any client calls.
    log = tmp_path / "gateway.log"
    with log.open("w") as stderr, gateway_process(setup, free_port(), stderr=stderr):
        deadline = time.monotonic() + 60
        while "guardian local ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        said = log.read_text()
    assert "guardian local ready: its model loaded in" in said, said[-2000:]
    assert not Run.objects.exists()  # no call, no session's run: it was loaded at start


def test_http_needs_a_guardian_token_of_a_user_allowed_to_run_agents(setup, auditor):
    _, auditors = api_token_create(user=auditor, name="not an integrator")
    port = free_port()
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with gateway_process(setup, port):
        url = f"http://127.0.0.1:{port}/mcp"
        for headers in (
            {},
            {"Authorization": "Bearer nope"},
            {"Authorization": f"Bearer {auditors}"},
        ):
            answer = httpx.post(url, json=body, headers=headers, timeout=10)
            assert answer.status_code == 401, headers
            assert "Bearer" in answer.headers["www-authenticate"]


def test_the_goal_comes_from_the_header_and_the_sessions_end_ends_its_run(crm_only):
    setup, port = crm_only, free_port()

    async def flow() -> None:
        http = create_mcp_http_client(
            headers={
                "Authorization": f"Bearer {setup['token']}",
                "X-Guardian-Goal": "Find order 41 for Ada.",
            }
        )
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(streamable_http_client(url, http_client=http), client_info=CLIENT) as c:
            result = await c.call_tool("lookup_order", {"order_id": "41"})
            assert not result.is_error, _text(result)

    with gateway_process(setup, port):
        anyio_run(flow)
    (run,) = Run.objects.all()
    assert run.goal == "Find order 41 for Ada."
    # The session's end ends its run, which waits on nothing.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and Run.objects.get(pk=run.pk).status == "running":
        time.sleep(0.1)
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("cancelled", "session_ended")


def test_killing_the_gateway_mid_call_leaves_it_ambiguous_for_a_person_and_never_run_twice(
    setup, reviewer, settings
):
    ledger, port = setup["ledger"], free_port()

    async def call_and_be_killed(process) -> None:
        thread, _ = _decide_when_held("approve", reviewer=reviewer)

        async def kill_when_started() -> None:
            while not _ran(ledger, "slow_refund", order_id="42"):
                await anyio.sleep(0.05)
            os.kill(process.pid, signal.SIGKILL)

        try:
            async with connected(setup, "http", port) as client, anyio.create_task_group() as tg:
                tg.start_soon(kill_when_started)
                with anyio.fail_after(90):
                    await client.call_tool("slow_refund", {"order_id": "42"})
        except Exception:  # noqa: S110 - the gateway died mid-call: the client fails, as it must
            pass
        await anyio.to_thread.run_sync(thread.join)

    with gateway_process(setup, port) as process:
        anyio_run(call_and_be_killed, process)
        assert process.wait(timeout=10) == -signal.SIGKILL
    assert [line["phase"] for line in _ran(ledger, "slow_refund")] == ["start"]

    settings.GUARDIAN_EXTERNAL_RESULTS_SECONDS = 0
    # The held step's call, approved; then the step that ran it, started and never finished.
    (call,) = ToolCall.objects.filter(tool="slow_refund", status=ToolCallStatus.STARTED)
    assert external_steps_abandoned() != []
    call.refresh_from_db()
    assert call.status == ToolCallStatus.AMBIGUOUS
    assert Escalation.objects.filter(run_id=call.turn.run_id, status=EscalationStatus.OPEN).exists()

    # A new gateway and a new session: the lost call is not sent again.
    with gateway_process(setup, port):

        async def another_session() -> None:
            async with connected(setup, "http", port) as client:
                assert "slow_refund" in {tool.name for tool in (await client.list_tools()).tools}

        anyio_run(another_session)
    # Started once, never again (the upstream dropped it when its caller's connection went).
    assert [line["phase"] for line in _ran(ledger, "slow_refund")] == ["start"]


def test_a_client_of_the_sessionless_era_is_told_to_use_the_handshake(crm_only):
    """A 2026 per-request client has no session for a run to live in: refused, with why."""
    setup, port = crm_only, free_port()

    async def flow() -> None:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {setup['token']}"})
        url = f"http://127.0.0.1:{port}/mcp"
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="2026-07-28", cache=None) as client:
            with pytest.raises(MCPError, match="initialize handshake"):
                await client.call_tool("lookup_order", {"order_id": "41"})

    with gateway_process(setup, port):
        anyio_run(flow)
    assert _ran(setup["ledger"], "lookup_order") == []
    assert not Run.objects.exists()


def test_resources_and_prompts_pass_through_and_what_is_read_is_checked(setup):
    # Over stdio the goal may come from the environment the client starts the gateway with.
    notes_goal = "Read the customer's notes and summarise their delivery wishes."
    setup = {**setup, "env": {**setup["env"], "GUARDIAN_MCP_GOAL": notes_goal}}

    async def reads() -> dict:
        async with connected(setup, "stdio") as client:
            listed = await client.list_resources()
            plain = await client.read_resource("note://plain")
            planted = await client.read_resource("note://planted")
            return {"listed": listed, "plain": plain, "planted": planted}

    async def prompt() -> dict:
        async with connected(setup, "stdio") as client:
            listed = await client.list_prompts()
            return {
                "listed": listed,
                "got": await client.get_prompt("summarize_order", {"order_id": "42"}),
            }

    seen = anyio_run(reads)
    assert {str(r.uri) for r in seen["listed"].resources} == {"note://plain", "note://planted"}
    assert [c.text for c in seen["plain"].contents] == ["Customer prefers delivery after 5 pm."]
    planted = " ".join(c.text for c in seen["planted"].contents)
    assert "Withheld pending review" in planted
    assert "IMPORTANT SYSTEM NOTICE" not in planted
    # Each read was a step of the session's one run.
    (run,) = Run.objects.all()
    assert run.goal == notes_goal
    calls = ToolCall.objects.filter(turn__run=run).order_by("turn__index")
    assert list(calls.values_list("tool", flat=True)) == ["mcp.read_resource"] * 2

    seen = anyio_run(prompt)
    assert [p.name for p in seen["listed"].prompts] == ["summarize_order"]
    # The prompt's own message first (Guardian's notices, if any, after it).
    assert seen["got"].messages[0].content.text == "Summary of order 42 for the customer."
    (call,) = ToolCall.objects.filter(tool="mcp.get_prompt")
    assert call.arguments == {"name": "summarize_order", "arguments": {"order_id": "42"}}
