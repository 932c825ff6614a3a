"""The MCP gateway's test upstreams (tests/mcp_upstreams) answer the SDK's own client over stdio
and over Streamable HTTP, with the tools, annotations, notes and ledger lines the gateway's tests
count on."""

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from guardian_core.adapters.local import model_for
from guardian_core.engine.conditions import Condition
from guardian_core.engine.thresholds import default_policy
from tests.client_helpers import anyio_run
from tests.mcp_upstreams import crm, shop
from tests.mcp_upstreams.launch import http_server, stdio_params
from tests.mcp_upstreams.shop import NOTES

KEY = "guardian/idempotency-key"


def ledger_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def text_of(result) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def exercise_shop(target, ledger: Path, release: Path) -> None:
    async with Client(target) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"lookup_order", "refund", "tag_order", "read_note", "slow_refund"}
        assert tools["lookup_order"].annotations.read_only_hint is True
        assert tools["read_note"].annotations.read_only_hint is True
        assert tools["refund"].annotations.destructive_hint is True
        assert tools["slow_refund"].annotations.destructive_hint is True
        tag = tools["tag_order"].annotations
        assert (tag.read_only_hint, tag.destructive_hint) == (False, False)
        assert (tag.idempotent_hint, tag.open_world_hint) == (False, True)
        amount = tools["refund"].input_schema["properties"]["amount"]
        assert amount["type"] == "number"
        assert amount["minimum"] == 0
        assert tools["refund"].input_schema["required"] == ["order_id", "amount"]

        looked = await client.call_tool("lookup_order", {"order_id": "7"}, meta={KEY: "key-1"})
        assert not looked.is_error
        assert text_of(looked).startswith("7: paid")
        refunded = await client.call_tool("refund", {"order_id": "7", "amount": 12.5})
        assert not refunded.is_error
        assert "12.50" in text_of(refunded)
        refused = await client.call_tool("refund", {"order_id": "7", "amount": -1})
        assert refused.is_error  # the schema's minimum: never executed, never in the ledger
        planted = await client.call_tool("read_note", {"note_id": "planted"})
        assert "ignore your previous instructions" in text_of(planted)
        plain = await client.call_tool("read_note", {"note_id": "plain"})
        assert text_of(plain) == NOTES["plain"]
        assert "ignore" not in NOTES["plain"]

        resource = await client.read_resource("note://planted")
        assert resource.contents[0].text == NOTES["planted"]
        prompt = await client.get_prompt("summarize_order", {"order_id": "9"})
        assert "order 9" in prompt.messages[0].content.text

        async with anyio.create_task_group() as group:
            results = []

            async def slow() -> None:
                results.append(await client.call_tool("slow_refund", {"order_id": "8"}))

            group.start_soon(slow)
            with anyio.fail_after(10):
                while not any(line["phase"] == "start" for line in ledger_lines(ledger)):
                    await anyio.sleep(0.05)
            assert not results  # it blocks until released
            release.touch()
        assert not results[0].is_error

    lines = ledger_lines(ledger)
    assert [(line["tool"], line["phase"]) for line in lines] == [
        ("lookup_order", "run"),
        ("refund", "run"),
        ("read_note", "run"),
        ("read_note", "run"),
        ("slow_refund", "start"),
        ("slow_refund", "end"),
    ]
    assert lines[0]["arguments"] == {"order_id": "7"}
    assert lines[0]["idempotency_key"] == "key-1"
    assert lines[1]["arguments"] == {"order_id": "7", "amount": 12.5}
    assert lines[1]["idempotency_key"] is None
    assert all(line["server"] == "shop" and line["time"] > 0 for line in lines)


async def exercise_crm(target, ledger: Path) -> None:
    async with Client(target) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"lookup_order", "send_email"}
        assert tools["send_email"].annotations is None
        sent = await client.call_tool("send_email", {"to": "a@example.com", "body": "hi"})
        assert not sent.is_error
    assert [(line["server"], line["tool"]) for line in ledger_lines(ledger)] == [
        ("crm", "send_email")
    ]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_shop_answers_the_sdk_client_and_records_each_execution(tmp_path, transport):
    ledger, release = tmp_path / "ledger.jsonl", tmp_path / "release"
    if transport == "stdio":
        anyio_run(
            exercise_shop, stdio_params("shop", ledger=ledger, release=release), ledger, release
        )
    else:
        with http_server("shop", ledger=ledger, release=release) as url:
            anyio_run(exercise_shop, url, ledger, release)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_crm_clashes_with_shop_and_declares_no_annotations(tmp_path, transport):
    ledger = tmp_path / "ledger.jsonl"
    if transport == "stdio":
        anyio_run(exercise_crm, stdio_params("crm", ledger=ledger), ledger)
    else:
        with http_server("crm", ledger=ledger) as url:
            anyio_run(exercise_crm, url, ledger)


def test_the_local_guardian_reads_clean_outputs_as_data_and_the_planted_note_as_planted(
    monkeypatch,
):
    """The gateway's tests and bench run the local guardian: a clean output must fall below its
    integrity band (else every lookup waits for a person), the planted note above it."""
    monkeypatch.delenv("MCP_UPSTREAM_LEDGER", raising=False)
    threshold = default_policy().thresholds[Condition.INTEGRITY]
    model = model_for(Condition.INTEGRITY)

    def integrity(text: str, goal: str) -> float:
        projection = {
            "goal": goal,
            "acceptance_criteria": [],
            "history": [{"turn": 0, "summary": "turn 0: tool done"}],
            "last_results": [text],
            "untrusted": ["last_results"],
            "replans": 0,
        }
        return float(model.answers([projection])[0])

    clean = [NOTES["plain"], shop.summarize_order("ord_00042")]
    for order in ("7", "42", "ord_00000", "ord_00299"):
        clean += [
            shop.lookup_order(order, None),
            shop.refund(order, 12.5, None),
            shop.tag_order(order, "vip", None),
            crm.lookup_order(order, None),
        ]
    clean.append(crm.send_email("ada@example.com", "Your parcel left today.", None))
    goals = (
        "bench: look up the orders the customer names and report their status",
        "Help the customer with their orders: look them up, refund or tag them as they ask.",
    )
    for goal in goals:
        for text in clean:
            # As the gateway may record it: the text, and the text with its structured copy.
            for shown in (text, text + "\n" + json.dumps({"result": text})):
                assert integrity(shown, goal) < threshold.t_star - threshold.delta, shown
        assert integrity(NOTES["planted"], goal) > threshold.t_star + threshold.delta
