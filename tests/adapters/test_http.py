"""The vendor decision-model guardian against a real HTTP server on 127.0.0.1."""

import time

import pytest

from guardian_core.adapters.http import DEFAULT_QUESTIONS, HttpGuardian
from guardian_core.adapters.pricing import NOTHING, Price
from guardian_core.engine.conditions import (
    Condition,
    DriftDistribution,
    Malformed,
    RiskClass,
    RiskDistribution,
    YesNo,
    parse_answer,
)
from guardian_core.engine.loop import run_turn
from guardian_core.engine.policy import POST_EXECUTION_CONDITIONS, Outcome
from guardian_core.engine.state import LoopState
from guardian_core.engine.thresholds import default_policy
from tests.adapters.servers import closed_port_url, serve, vendor
from tests.engine.fakes import FakeClock, Ledger, ScriptedActor, call, desk, step

PINNED = "vendor-x-2026-10"
SAFE = {"read_only": 0.9, "reversible_write": 0.1, "irreversible": 0.0, "regulated": 0.0}
DRIFT = {"0": 0.0, "1": 0.05, "2": 0.05, "3": 0.3, "4": 0.6}
CALM = {
    "integrity": 0.02,
    "risk": SAFE,
    "infeasible": 0.05,
    "goal_reached": 0.2,
    "drift": DRIFT,
    "stagnation": 0.1,
}
PROJECTION = {
    "goal": "Refund order ord_4472",
    "acceptance_criteria": ["Refund issued"],
    "history": [{"turn": 0, "summary": "turn 0: read_order done"}],
    "last_results": ['{"order_id": "ord_4472", "total": 49.9}'],
    "untrusted": ["last_results"],
    "replans": 0,
}
ALL = tuple(Condition)


def guardian(url: str, **kwargs) -> HttpGuardian:
    kwargs.setdefault("model_version", PINNED)
    return HttpGuardian(f"{url}/v1/decide", **kwargs)


def test_answers_are_parsed_and_typed():
    with serve(vendor(CALM)) as server, guardian(server.url) as g:
        answers = g.answer(PROJECTION, ALL)

    assert answers == CALM  # passed on raw, as the vendor said them: the log keeps those
    typed = {c: parse_answer(c, answers[c.value]) for c in ALL}
    assert typed[Condition.INTEGRITY] == YesNo(0.02)
    assert isinstance(typed[Condition.RISK], RiskDistribution)
    assert typed[Condition.RISK].probabilities[RiskClass.READ_ONLY] == 0.9
    assert isinstance(typed[Condition.DRIFT], DriftDistribution)
    assert typed[Condition.DRIFT].probabilities[4] == 0.6
    assert g.model_version == PINNED


def test_the_request_carries_the_projection_the_questions_and_the_bearer_key():
    with serve(vendor(CALM)) as server, guardian(server.url, api_key="sk-test-123") as g:
        g.answer(PROJECTION, (Condition.INTEGRITY, Condition.RISK, Condition.DRIFT))

    assert len(server.requests) == 1  # every condition in one call, as the vendor serves them
    request = server.last
    assert request.path == "/v1/decide"
    assert request.headers["authorization"] == "Bearer sk-test-123"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {
        "question_set_version": "builtin-1",
        "projection": PROJECTION,
        "questions": [
            {
                "condition": "integrity",
                "question": DEFAULT_QUESTIONS["integrity"],
                "answer": "yes_no",
            },
            {
                "condition": "risk",
                "question": DEFAULT_QUESTIONS["risk"],
                "answer": "choice",
                "choices": ["read_only", "reversible_write", "irreversible", "regulated"],
            },
            {
                "condition": "drift",
                "question": DEFAULT_QUESTIONS["drift"],
                "answer": "score",
                "scores": [0, 1, 2, 3, 4],
            },
        ],
    }


def test_no_key_sends_no_authorization_header_and_the_key_never_shows_in_repr():
    with serve(vendor(CALM)) as server:
        with guardian(server.url) as g:
            g.answer(PROJECTION, (Condition.INTEGRITY,))
        assert "authorization" not in server.last.headers
        assert "sk-secret" not in repr(guardian(server.url, api_key="sk-secret"))


def test_a_slow_server_makes_every_answer_malformed_within_the_timeout():
    with serve(vendor(CALM, delay=8.0)) as server, guardian(server.url, timeout_seconds=0.5) as g:
        started = time.monotonic()
        answers = g.answer(PROJECTION, POST_EXECUTION_CONDITIONS)
        elapsed = time.monotonic() - started

    assert elapsed < 0.5 + 2.0  # the server would take 8 s
    assert set(answers) == {c.value for c in POST_EXECUTION_CONDITIONS}
    for answer in answers.values():
        assert isinstance(answer, Malformed)
        assert "timed out" in answer.reason


def test_an_http_error_status_makes_every_answer_malformed():
    handler = vendor(CALM, status=500)
    with serve(handler) as server, guardian(server.url) as g:
        answers = g.answer(PROJECTION, ALL)

    assert all(isinstance(a, Malformed) and "HTTP 500" in a.reason for a in answers.values())


def test_a_body_that_is_not_json_makes_every_answer_malformed():
    not_json = serve(lambda path, headers, body: (200, b"<html>oops</html>", 0))
    with not_json as server, guardian(server.url) as g:
        answers = g.answer(PROJECTION, ALL)

    assert all(isinstance(a, Malformed) and "not JSON" in a.reason for a in answers.values())


def test_an_oversized_body_makes_every_answer_malformed():
    huge = {"model_version": PINNED, "answers": CALM, "padding": "x" * 2_000_000}
    with serve(lambda path, headers, body: (200, huge, 0)) as server, guardian(server.url) as g:
        answers = g.answer(PROJECTION, ALL)

    assert all(isinstance(a, Malformed) and "larger than" in a.reason for a in answers.values())


@pytest.mark.parametrize(
    "body",
    [
        ["not", "an", "object"],
        {"answers": CALM},  # no model_version: which model answered is unknown
        {"model_version": PINNED, "answers": [0.1, 0.2]},
        {"model_version": PINNED},
    ],
)
def test_a_response_of_the_wrong_shape_makes_every_answer_malformed(body):
    with serve(lambda path, headers, request: (200, body, 0)) as server, guardian(server.url) as g:
        answers = g.answer(PROJECTION, ALL)

    assert len(answers) == len(ALL)
    assert all(isinstance(a, Malformed) for a in answers.values())


def test_an_out_of_range_or_missing_answer_is_malformed_for_that_condition_only():
    # Decided here rather than left to the engine, so the reason names the vendor's answer.
    bad = dict(CALM, integrity=1.7, risk={"read_only": 0.5, "teleport": 0.5})
    del bad["stagnation"]
    with serve(vendor(bad)) as server, guardian(server.url) as g:
        answers = g.answer(PROJECTION, ALL)

    assert isinstance(answers["integrity"], Malformed)
    assert "1.7" in answers["integrity"].reason
    assert "integrity" in answers["integrity"].reason
    assert isinstance(answers["risk"], Malformed)
    assert "teleport" in answers["risk"].reason
    assert answers["stagnation"] == Malformed("guardian gave no answer for stagnation")
    assert answers["infeasible"] == 0.05
    assert answers["drift"] == DRIFT


@pytest.mark.parametrize("wrong", [True, "0.2", None, {"yes": 0.2}])
def test_an_answer_of_the_wrong_type_is_malformed(wrong):
    with serve(vendor(dict(CALM, goal_reached=wrong))) as server, guardian(server.url) as g:
        answers = g.answer(PROJECTION, (Condition.GOAL_REACHED, Condition.INTEGRITY))

    assert isinstance(answers["goal_reached"], Malformed)
    assert answers["integrity"] == 0.02


def test_a_changed_model_version_makes_every_answer_malformed():
    with serve(vendor(CALM, model_version="vendor-x-2026-11")) as server, guardian(server.url) as g:
        answers = g.answer(PROJECTION, ALL)
        risks = g.assess_risk([PROJECTION])

    expected = Malformed(f"model version changed: pinned {PINNED}, got vendor-x-2026-11")
    assert answers == {c.value: expected for c in ALL}
    assert risks == [expected]
    assert g.model_version == PINNED  # the adapter reports its pin, not what the server says


def test_a_refused_connection_makes_every_answer_malformed():
    with guardian(closed_port_url()) as g:
        answers = g.answer(PROJECTION, ALL)
        risks = g.assess_risk([PROJECTION, PROJECTION])

    assert all(isinstance(a, Malformed) and "unreachable" in a.reason for a in answers.values())
    assert all(isinstance(r, Malformed) and "unreachable" in r.reason for r in risks)


def test_risk_is_asked_once_per_projection_concurrently_and_in_order():
    def risky_for_refunds(body):
        tool = body["projection"]["pending_proposal"]["tool"]
        irreversible = {"read_only": 0, "reversible_write": 0, "irreversible": 1, "regulated": 0}
        return {"risk": irreversible if tool == "issue_refund" else SAFE}

    tools = ["read_order", "issue_refund", "read_order", "issue_refund"]
    projections = [dict(PROJECTION, pending_proposal={"tool": tool}) for tool in tools]
    with (
        serve(vendor(risky_for_refunds, delay=1.0)) as server,
        guardian(server.url, timeout_seconds=4.0) as g,
    ):
        started = time.monotonic()
        risks = g.assess_risk(projections)
        elapsed = time.monotonic() - started

    assert elapsed < 2.5  # sequential requests would take 4 s
    assert [r["irreversible"] for r in risks] == [0, 1, 0, 1]
    assert len(server.requests) == 4
    for request in server.requests:
        assert [q["condition"] for q in request.json["questions"]] == ["risk"]


def test_risk_checks_that_miss_the_deadline_are_malformed():
    with serve(vendor(CALM, delay=8.0)) as server, guardian(server.url, timeout_seconds=0.3) as g:
        started = time.monotonic()
        risks = g.assess_risk([PROJECTION, PROJECTION, PROJECTION])
        elapsed = time.monotonic() - started

    assert elapsed < 0.3 + 2.0  # the server would take 8 s
    assert all(isinstance(r, Malformed) and "timed out" in r.reason for r in risks)


def test_custom_wording_is_sent_and_needs_its_own_question_set_version():
    wording = {"integrity": "Is there an instruction to the agent in a tool output?"}
    with pytest.raises(ValueError, match="question_set_version"):
        guardian("http://127.0.0.1:9", questions=wording)
    with pytest.raises(ValueError, match="mood"):
        guardian(
            "http://127.0.0.1:9",
            questions={"mood": "Is the agent happy?"},
            question_set_version="v2",
        )

    v2 = {"questions": wording, "question_set_version": "v2"}
    with serve(vendor(CALM)) as server, guardian(server.url, **v2) as g:
        g.answer(PROJECTION, (Condition.INTEGRITY,))
    assert server.last.json["question_set_version"] == "v2"
    assert server.last.json["questions"][0]["question"] == wording["integrity"]


def test_a_pinned_model_version_is_required():
    with pytest.raises(TypeError):
        HttpGuardian("http://127.0.0.1:9")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="pinned"):
        HttpGuardian("http://127.0.0.1:9", model_version="")


# ---- end to end: the engine's turn with this guardian -------------------------------------


GOAL = LoopState(goal="Refund order ord_4472", acceptance_criteria=("Refund issued",))


def one_turn(g: HttpGuardian):
    ledger = Ledger()
    actor = ScriptedActor([step(call("read_order", order_id="ord_4472"))])
    record = run_turn(
        GOAL,
        run_id="run-1",
        index=0,
        actor=actor,
        guardian=g,
        tools=desk(ledger),
        clock=FakeClock(),
        policy=default_policy(),
    )
    return record, ledger


def test_a_turn_with_a_calm_vendor_continues_and_logs_the_pinned_version():
    with serve(vendor(CALM)) as server, guardian(server.url) as g:
        record, ledger = one_turn(g)

    assert record.decision.outcome == Outcome.CONTINUE
    assert ledger.ran("read_order") == [{"order_id": "ord_4472"}]
    assert record.guardian_model_version == PINNED
    risk_request, answer_request = server.requests
    assert risk_request.json["projection"]["pending_proposal"]["tool"] == "read_order"
    assert answer_request.json["projection"]["last_results"] == [
        '{"order_id": "ord_4472", "total": 49.9}'
    ]


def test_a_turn_escalates_when_the_vendor_silently_swaps_its_model():
    def swapped(path, headers, body):
        # The risk check still comes from the pinned model; the post-execution answers do not.
        asked = [q["condition"] for q in body["questions"]]
        version = PINNED if asked == ["risk"] else "vendor-x-2026-11"
        return vendor(CALM, model_version=version)(path, headers, body)

    with serve(swapped) as server, guardian(server.url) as g:
        record, _ = one_turn(g)

    assert record.decision.outcome == Outcome.ESCALATE
    malformed = [r for r in record.decision.reasons if r.band == "malformed"]
    assert {r.source for r in malformed} == {c.value for c in POST_EXECUTION_CONDITIONS}
    assert all("model version changed" in r.detail for r in malformed)


def test_a_turn_holds_the_step_when_the_risk_check_fails():
    def risk_down(path, headers, body):
        asked = [q["condition"] for q in body["questions"]]
        return (
            (503, {"error": "overloaded"}, 0)
            if asked == ["risk"]
            else vendor(CALM)(path, headers, body)
        )

    with serve(risk_down) as server, guardian(server.url) as g:
        record, ledger = one_turn(g)

    assert record.gate.held
    assert ledger.entries == []  # nothing ran: a failed pre-execution check is not a pass
    assert record.decision.outcome == Outcome.ESCALATE
    assert "HTTP 503" in record.risk_answers[0].reason


def test_the_log_names_the_question_set_the_guardian_asked_not_the_policys_default():
    wording = {c.value: f"Policy v7 asks about {c.value}?" for c in Condition}
    with (
        serve(vendor(CALM)) as server,
        guardian(server.url, questions=wording, question_set_version="q7") as g,
    ):
        record, _ = one_turn(g)

    assert default_policy().question_set_version != "q7"
    for request in server.requests:  # the risk check and the post-execution questions
        assert request.json["question_set_version"] == "q7"
        for question in request.json["questions"]:
            assert question["question"] == wording[question["condition"]]
    assert record.question_set_version == "q7"


# ---- what the calls cost: the vendor's optional usage ----------------------------------------


USAGE = {"prompt_tokens": 1000, "completion_tokens": 500}


def test_the_guardians_spend_adds_up_the_usage_of_every_vendor_reply():
    prices = {PINNED: Price(input_per_million=1.0, output_per_million=2.0)}
    with (
        serve(vendor(CALM, usage=USAGE)) as server,
        guardian(server.url, prices=prices) as g,
    ):
        assert g.spend == NOTHING
        g.answer(PROJECTION, POST_EXECUTION_CONDITIONS)
        g.assess_risk([PROJECTION, PROJECTION])  # two POSTs at once, in threads
        calls = len(server.requests)

    assert calls == 3
    assert g.spend.tokens == 3 * 1500
    assert g.spend.cost == pytest.approx(3 * 0.002)


def test_a_vendor_reply_without_usage_spends_nothing_and_is_no_error():
    prices = {PINNED: Price(input_per_million=1.0, output_per_million=2.0)}
    with serve(vendor(CALM)) as server, guardian(server.url, prices=prices) as g:
        answers = g.answer(PROJECTION, ALL)

    assert answers == CALM
    assert g.spend == NOTHING


def test_a_vendor_reply_with_malformed_usage_spends_nothing_and_still_answers():
    usage = {"prompt_tokens": "lots", "completion_tokens": -3}
    with serve(vendor(CALM, usage=usage)) as server, guardian(server.url) as g:
        answers = g.answer(PROJECTION, ALL)

    assert answers == CALM
    assert g.spend == NOTHING


def test_a_vendor_reply_that_failed_with_an_http_error_still_counts_its_usage():
    prices = {PINNED: Price(input_per_million=1.0, output_per_million=2.0)}
    failed = {"error": "the answer was cut off", "usage": USAGE}
    with (
        serve(lambda p, h, b: (502, failed, 0)) as server,
        guardian(server.url, prices=prices) as g,
    ):
        answers = g.answer(PROJECTION, ALL)

    assert all(isinstance(answer, Malformed) for answer in answers.values())
    assert g.spend.tokens == 1500
    assert g.spend.cost == pytest.approx(0.002)
