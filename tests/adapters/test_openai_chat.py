"""The OpenAI-compatible coder/reviewer agent against a real chat-completions server on
127.0.0.1: what it sends, how each finish_reason reaches the loop, tokens and cost, and
failures that must raise rather than pass as code or a verdict."""

import json

import pytest

from guardian_core.adapters.openai_chat import ChatAgentError, OpenAIChatAgent
from guardian_core.adapters.pricing import Price
from guardian_core.engine.reviewer_loop import (
    EmptyOutput,
    EndReason,
    Message,
    TruncatedOutput,
    UnexpectedStopReason,
    check_reply,
    run_review_loop,
)
from tests.adapters.servers import chat_by_model, chat_completion, closed_port_url, serve

CODER = "coder-large"
REVIEWER = "reviewer-small"
CODE = "```python\ndef add(a, b):\n    return a + b\n```"
APPROVED = json.dumps({"verdict": "APPROVED", "reasons": []})
HISTORY = (
    Message("user", "Write add(a, b)."),
    Message("assistant", "```python\ndef add(a, b): return a - b\n```"),
    Message("user", "Your solution was not accepted: it subtracts."),
)


def answering(body: dict, *, delay: float = 0.0):
    return lambda path, headers, request: (200, body, delay)


def agent(url: str, model: str = CODER, **kwargs) -> OpenAIChatAgent:
    return OpenAIChatAgent(f"{url}/v1", model, **kwargs)


def test_the_whole_history_is_sent_in_order_verbatim() -> None:
    with serve(answering(chat_completion(CODER, CODE))) as server, agent(server.url) as coder:
        coder.reply(HISTORY)
    request = server.last
    assert request.path == "/v1/chat/completions"
    assert request.json["model"] == CODER
    assert request.json["messages"] == [{"role": m.role, "content": m.content} for m in HISTORY]


def test_a_complete_answer_carries_the_model_version_the_server_reports() -> None:
    snapshot = f"{CODER}-2026-03-01"  # an alias asked, a dated snapshot answered
    with serve(answering(chat_completion(snapshot, CODE))) as server, agent(server.url) as coder:
        reply = coder.reply(HISTORY)
    assert (reply.text, reply.stop_reason, reply.model_version) == (CODE, "end_turn", snapshot)
    check_reply(reply, role="coder", round_number=1)  # a complete answer: no error


def test_a_truncated_answer_raises_in_the_loop_instead_of_passing_as_code() -> None:
    cut = chat_completion(CODER, CODE, finish_reason="length")  # reads like code, but cut off
    with serve(answering(cut)) as server, agent(server.url) as coder:
        reply = coder.reply(HISTORY)
    assert reply.stop_reason == "max_tokens"
    with pytest.raises(TruncatedOutput, match="the coder in round 2 stopped at its limit"):
        check_reply(reply, role="coder", round_number=2)


@pytest.mark.parametrize("content", [None, "", "  \n"])
def test_an_empty_answer_raises_in_the_loop(content) -> None:
    served = serve(answering(chat_completion(REVIEWER, content)))
    with served as server, agent(server.url, REVIEWER) as reviewer:
        reply = reviewer.reply(HISTORY)
    with pytest.raises(EmptyOutput, match="the reviewer in round 1 gave an empty answer"):
        check_reply(reply, role="reviewer", round_number=1)


def test_the_content_filter_is_a_refusal() -> None:
    filtered = chat_completion(REVIEWER, "", finish_reason="content_filter")
    with serve(answering(filtered)) as server, agent(server.url, REVIEWER) as reviewer:
        reply = reviewer.reply(HISTORY)
    assert reply.stop_reason == "refusal"
    assert check_reply(reply, role="reviewer", round_number=1) is True


def test_a_refusal_field_is_a_refusal_with_its_text_even_when_finished_normally() -> None:
    refused = chat_completion(CODER, None, refusal="I can't help with that.")
    with serve(answering(refused)) as server, agent(server.url) as coder:
        reply = coder.reply(HISTORY)
    assert (reply.stop_reason, reply.text) == ("refusal", "I can't help with that.")


def test_a_tool_call_finish_is_not_an_answer() -> None:
    tool_use = chat_completion(CODER, None, finish_reason="tool_calls")
    with serve(answering(tool_use)) as server, agent(server.url) as coder:
        reply = coder.reply(HISTORY)
    with pytest.raises(UnexpectedStopReason):
        check_reply(reply, role="coder", round_number=1)


def test_tokens_and_cost_come_from_usage_at_the_models_price() -> None:
    body = chat_completion(CODER, CODE, prompt_tokens=1000, completion_tokens=200)
    prices = {CODER: Price(input_per_million=2.0, output_per_million=10.0)}
    with serve(answering(body)) as server, agent(server.url, prices=prices) as coder:
        reply = coder.reply(HISTORY)
    assert reply.tokens == 1200
    assert reply.cost == pytest.approx((1000 * 2.0 + 200 * 10.0) / 1e6)


def test_the_reported_snapshot_may_carry_its_own_price() -> None:
    snapshot = f"{CODER}-2026-03-01"
    body = chat_completion(snapshot, CODE, prompt_tokens=1_000_000, completion_tokens=0)
    prices = {snapshot: Price(input_per_million=3.0), CODER: Price(input_per_million=1.0)}
    with serve(answering(body)) as server, agent(server.url, prices=prices) as coder:
        assert coder.reply(HISTORY).cost == pytest.approx(3.0)


def test_an_unpriced_model_still_counts_its_tokens() -> None:
    body = chat_completion(CODER, CODE, prompt_tokens=10, completion_tokens=5)
    with serve(answering(body)) as server, agent(server.url) as coder:
        reply = coder.reply(HISTORY)
    assert (reply.tokens, reply.cost) == (15, 0.0)


def test_a_timeout_raises_instead_of_waiting_forever() -> None:
    served = serve(answering(chat_completion(CODER, CODE), delay=5))
    timing_out = pytest.raises(ChatAgentError, match="timed out after 0.3 s")
    with served as server, agent(server.url, timeout_seconds=0.3) as coder, timing_out:
        coder.reply(HISTORY)


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (500, {"error": {"message": "overloaded"}}, "answered HTTP 500"),
        (200, b"<html>not json</html>", "not JSON"),
        (200, {"choices": []}, "names no model"),
        (200, {"model": CODER, "choices": []}, "no choices"),
        (200, {"model": CODER, "choices": [{"message": {"content": 7}}]}, "not text"),
    ],
)
def test_a_response_that_is_not_a_chat_answer_raises(status, body, error) -> None:
    served = serve(lambda path, headers, request: (status, body, 0.0))
    with served as server, agent(server.url) as coder, pytest.raises(ChatAgentError, match=error):
        coder.reply(HISTORY)


def test_an_unreachable_server_raises() -> None:
    with agent(closed_port_url()) as coder, pytest.raises(ChatAgentError, match="unreachable"):
        coder.reply(HISTORY)


def test_the_api_key_goes_in_the_header_and_never_in_the_repr() -> None:
    served = serve(answering(chat_completion(CODER, CODE)))
    with served as server, agent(server.url, api_key="sk-secret") as coder:
        coder.reply(HISTORY)
        assert "sk-secret" not in repr(coder)
    assert server.last.headers["authorization"] == "Bearer sk-secret"


def test_a_different_model_reviews_the_coders_code() -> None:
    handler = chat_by_model(
        {
            CODER: [chat_completion(CODER, CODE)],
            REVIEWER: [chat_completion(REVIEWER, APPROVED)],
        }
    )
    with (
        serve(handler) as server,
        agent(server.url) as coder,
        agent(server.url, REVIEWER) as reviewer,
    ):
        outcome = run_review_loop("Write add(a, b).", coder=coder, reviewer=reviewer)
    assert outcome.reason == EndReason.APPROVED
    assert outcome.code == "def add(a, b):\n    return a + b"
    assert [request.json["model"] for request in server.requests] == [CODER, REVIEWER]
    assert "<code>\ndef add(a, b):" in server.requests[1].json["messages"][-1]["content"]
