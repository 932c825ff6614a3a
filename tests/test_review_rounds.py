"""The coder ⇄ reviewer run kind: one durable turn per model call (runs/review_rounds.py).

Scripted agents drive most tests in this process; an OpenAI-compatible chat server on
127.0.0.1 stands in for real models where the wire matters (refusals, usage, a failed call),
and the last test drives a run through real Celery worker processes and SIGKILLs one of them
between rounds."""

import json
import signal
import threading

import pytest

from demo.setup import demo_policy_version
from escalations.models import EscalationKind, EscalationStatus
from escalations.verdicts import escalation_resolve
from guardian_core.adapters.pricing import Price
from guardian_core.celery import app as celery_app
from guardian_core.engine.reviewer_loop import (
    ReviewState,
    VerdictError,
    parse_verdict,
    repair_prompt,
)
from runs.models import Decision, Run, RunStatus
from runs.scenarios import scenario_load
from runs.services import run_advance, run_start
from runs.sweeps import run_sweep_stalled
from tests.adapters.servers import chat_by_model, chat_completion, serve
from tests.processes import start_worker, stop_worker
from tests.runs_helpers import drive, start
from tests.test_worker_runs import status_of, wait_for, worker_env

TASK = "Write add(a, b) returning the sum of two integers."
CODE_1 = "def add(a, b):\n    return a - b"
CODE_2 = "def add(a, b):\n    return a + b"
CODER, REVIEWER = "coder-large", "reviewer-small"


def fenced(code: str) -> str:
    return f"Here it is.\n```python\n{code}\n```"


def verdict(kind: str, *reasons: str) -> str:
    return json.dumps({"verdict": kind, "reasons": list(reasons)})


APPROVED = verdict("APPROVED")
INVALID = "Looks fine to me!"


def scripted_run(coder: list[str], reviewer: list[str], *, max_rounds=3, budgets=None) -> Run:
    demo_policy_version()
    return run_start(
        goal=TASK,
        tools=[],
        actor="coder_reviewer",
        guardian="local",
        budgets=budgets or {},
        config={"review_loop": {"coder": coder, "reviewer": reviewer, "max_rounds": max_rounds}},
    )


def model_run(*, budgets=None, max_rounds=3) -> Run:
    demo_policy_version()
    return run_start(
        goal=TASK,
        tools=[],
        actor="coder_reviewer",
        guardian="local",
        budgets=budgets or {},
        config={"coder_model": CODER, "reviewer_model": REVIEWER, "max_rounds": max_rounds},
    )


def advance(run: Run, times: int) -> list[str]:
    return [run_advance(run_id=run.pk) for _ in range(times)]


def steps(run: Run) -> list[tuple[str, int]]:
    return [(t.proposal["step"], t.proposal["round"]) for t in run.turns.order_by("index")]


def reviews(run: Run) -> list[dict]:
    decisions = Decision.objects.filter(turn__run=run).order_by("turn__index")
    return [decision.reasons[0]["review"] for decision in decisions]


def outcomes(run: Run) -> list[str]:
    decisions = Decision.objects.filter(turn__run=run).order_by("turn__index")
    return list(decisions.values_list("outcome", flat=True))


@pytest.fixture
def chat_server(settings):
    """An OpenAI-compatible server the run's agents talk to; set `.handler` per test."""
    with serve(lambda path, headers, body: (500, {"error": "no handler"}, 0.0)) as server:
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        yield server


pytestmark = pytest.mark.django_db


# ---- one step, one turn ---------------------------------------------------------------------


def test_each_step_of_each_round_is_its_own_turn_with_its_own_decision():
    run = scripted_run(
        [fenced(CODE_1), fenced(CODE_2)], [verdict("CHANGES_REQUESTED", "subtracts"), APPROVED]
    )
    assert advance(run, 5) == ["continued", "continued", "continued", "finished", "skipped"]
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.final_answer) == (
        "succeeded",
        "review_approved",
        CODE_2,
    )
    assert steps(run) == [("coder", 1), ("reviewer", 1), ("coder", 2), ("reviewer", 2)]
    assert outcomes(run) == ["continue", "continue", "continue", "stop_success"]
    assert [r["verdict"] for r in reviews(run)] == [None, "CHANGES_REQUESTED", None, "APPROVED"]
    assert reviews(run)[1]["reasons"] == ["subtracts"]
    decision = Decision.objects.filter(turn__run=run).last()
    assert decision.guardian_model_version == "coder=scripted reviewer=scripted"
    assert decision.question_set_version == "review-loop-1"


def test_an_empty_reviewer_answer_fails_the_turn_until_the_run_stops_instead_of_running_forever(
    settings,
):
    # Defect: the whole loop ran in one turn; after this failure every retry hit the unique
    # (run, index) constraint and returned "skipped" forever, lease held, run "running".
    settings.GUARDIAN_MAX_ADVANCE_FAILURES = 3
    run = scripted_run([fenced(CODE_2)], [""])
    assert advance(run, 6) == ["continued", "failed", "failed", "failed", "skipped", "skipped"]
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.final_answer) == ("failed", "advance_failed", None)
    assert (run.lease_token, run.lease_expires_at, run.failures) == ("", None, 3)
    assert "EmptyOutput: the reviewer in round 1 gave an empty answer" in run.last_error
    # Every retry asked the same step on the same turn: no second row, no decision.
    assert steps(run) == [("coder", 1), ("reviewer", 1)]
    assert outcomes(run) == ["continue"]


def test_a_failed_call_is_asked_again_on_the_same_turn_with_the_same_request(chat_server):
    answers = {"reviewer": 0}

    def handler(path, headers, body):
        if body["model"] == CODER:
            return 200, chat_completion(CODER, fenced(CODE_2)), 0.0
        answers["reviewer"] += 1
        if answers["reviewer"] == 1:
            return 503, {"error": {"message": "overloaded"}}, 0.0
        return 200, chat_completion(REVIEWER, APPROVED), 0.0

    chat_server.handler = handler
    run = model_run()
    assert advance(run, 3) == ["continued", "failed", "finished"]
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert run.failures == 0  # a step that went through clears the count
    assert steps(run) == [("coder", 1), ("reviewer", 1)]
    first, retried = [r.json for r in chat_server.requests if r.json["model"] == REVIEWER]
    assert first == retried


# ---- the rules of the loop, as turns --------------------------------------------------------


def test_a_repair_turn_spends_no_coder_round():
    run = scripted_run(
        [fenced(CODE_1), fenced(CODE_2)],
        [INVALID, verdict("CHANGES_REQUESTED", "subtracts"), APPROVED],
        max_rounds=2,
    )
    run = drive(run)
    assert (run.status, run.final_answer) == ("succeeded", CODE_2)
    assert steps(run) == [
        ("coder", 1),
        ("reviewer", 1),
        ("repair", 1),
        ("coder", 2),
        ("reviewer", 2),
    ]
    parse_error = reviews(run)[1]["parse_error"]
    assert parse_error.startswith("not valid JSON")
    repair = run.turns.get(index=2)
    # The repair turn asks with the reviewer's full previous turn kept verbatim before it.
    with pytest.raises(VerdictError) as raised:
        parse_verdict(INVALID)
    assert repair.proposal["asked"] == [
        {"role": "user", "content": repair_prompt(raised.value), "blocks": []}
    ]
    history = ReviewState.from_dict(repair.state["loop"]).reviewer_history
    assert [(m.role, m.content) for m in history[1:3]] == [
        ("assistant", INVALID),
        ("user", repair_prompt(raised.value)),
    ]


def test_a_second_invalid_verdict_escalates_with_the_code_a_person_may_accept():
    run = drive(scripted_run([fenced(CODE_2)], [INVALID, '{"verdict": "APPROVED"}']))
    assert run.status == RunStatus.WAITING
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    assert escalation.kind == EscalationKind.REVIEW_LOOP
    assert escalation.reason["end_reason"] == "invalid_verdict"
    assert escalation.reason["last_code"] == CODE_2
    assert escalation.turn == run.turns.get(index=2)
    assert outcomes(run) == ["continue", "continue", "escalate"]


def test_a_refusal_escalates_instead_of_spending_another_round(chat_server):
    chat_server.handler = chat_by_model(
        {
            CODER: [chat_completion(CODER, fenced(CODE_2))],
            REVIEWER: [chat_completion(REVIEWER, None, refusal="I can't review that.")],
        }
    )
    run = drive(model_run())
    assert run.status == RunStatus.WAITING
    escalation = run.escalations.get()
    assert (escalation.kind, escalation.reason["end_reason"]) == ("review_loop", "refusal")
    assert escalation.reason["rounds"] == 1
    assert outcomes(run) == ["continue", "escalate"]
    assert reviews(run)[1]["refused"] is True
    state = run.turns.get(index=1).state
    assert state["reply"]["text"] == "I can't review that."
    assert state["models"] == {"coder": CODER, "reviewer": REVIEWER}


def test_the_round_cap_escalates_with_the_last_reasons():
    run = drive(start("coder_reviewer_round_cap"))
    assert run.status == RunStatus.WAITING
    escalation = run.escalations.get()
    assert escalation.reason["end_reason"] == "round_cap"
    assert escalation.reason["rounds"] == 2
    assert escalation.reason["last_reasons"] == [
        "Runs of dashes are not collapsed.",
        "Leading and trailing dashes remain.",
    ]
    assert escalation.reason["last_code"].startswith("import re")
    assert outcomes(run) == ["continue", "continue", "continue", "escalate"]
    expected = scenario_load("coder_reviewer_round_cap")["review_loop"]
    replies = [t.state["reply"]["text"] for t in run.turns.order_by("index")]
    assert replies == [
        expected["coder"][0],
        expected["reviewer"][0],
        expected["coder"][1],
        expected["reviewer"][1],
    ]


@pytest.mark.parametrize(
    ("decision", "reason", "label"), [("approve", "", True), ("reject", "No", False)]
)
def test_a_verdict_on_the_round_cap_is_a_goal_reached_labelled_example(
    reviewer, decision, reason, label
):
    run = drive(start("coder_reviewer_round_cap"))
    escalation = run.escalations.get()

    verdict = escalation_resolve(
        escalation_id=escalation.pk, reviewer=reviewer, decision=decision, reason=reason
    )

    example = verdict.examples.get()
    assert (example.condition, example.label, example.labelled_by) == (
        "goal_reached",
        label,
        reviewer,
    )
    assert example.projection["last_code"] == escalation.reason["last_code"]


# ---- budgets --------------------------------------------------------------------------------


def test_a_run_that_spends_its_token_budget_stops_with_no_answer_even_when_approved(chat_server):
    code = chat_completion(CODER, fenced(CODE_2), prompt_tokens=100, completion_tokens=20)
    approval = chat_completion(REVIEWER, APPROVED, prompt_tokens=100, completion_tokens=5)
    chat_server.handler = chat_by_model({CODER: [code], REVIEWER: [approval]})
    run = drive(model_run(budgets={"max_tokens": 200}))
    assert (run.status, run.stop_reason, run.final_answer) == ("failed", "token_budget", None)
    assert outcomes(run) == ["continue", "stop_failure"]
    assert run.turns.get(index=1).usage["tokens"] == 225


def test_a_run_that_spends_its_cost_budget_stops_with_no_answer(chat_server, settings):
    settings.GUARDIAN_MODEL_PRICES = {CODER: Price(input_per_million=1000.0)}  # 0.1 per call
    chat_server.handler = chat_by_model(
        {
            CODER: [chat_completion(CODER, fenced(CODE_1), prompt_tokens=100)] * 3,
            REVIEWER: [chat_completion(REVIEWER, verdict("CHANGES_REQUESTED", "no"))] * 3,
        }
    )
    run = drive(model_run(budgets={"max_cost": 0.15}))
    assert (run.status, run.stop_reason, run.final_answer) == ("failed", "cost_budget", None)
    assert steps(run) == [("coder", 1), ("reviewer", 1), ("coder", 2)]
    assert run.turns.get(index=2).usage["cost"] == pytest.approx(0.2)


def test_the_turn_cap_stops_a_loop_that_needs_another_turn():
    changes = verdict("CHANGES_REQUESTED", "subtracts")
    run = scripted_run([fenced(CODE_1)] * 3, [changes] * 3, budgets={"max_turns": 3})
    run = drive(run)
    assert (run.status, run.stop_reason, run.final_answer) == ("failed", "turn_cap", None)
    assert len(steps(run)) == 3
    assert not run.escalations.exists()


# ---- the record -----------------------------------------------------------------------------


def test_the_whole_conversation_can_be_rebuilt_from_the_turns_alone():
    run = drive(
        scripted_run(
            [fenced(CODE_1), fenced(CODE_2)],
            [INVALID, verdict("CHANGES_REQUESTED", "subtracts"), APPROVED],
        )
    )
    rebuilt: dict[str, list[dict]] = {"coder": [], "reviewer": []}
    for turn in run.turns.order_by("index"):
        role = turn.proposal["role"]
        rebuilt[role] += turn.proposal["asked"]  # what was asked, then what was answered
        reply = turn.state["reply"]
        rebuilt[role].append(
            {"role": "assistant", "content": reply["text"], "blocks": reply["blocks"]}
        )
    final = run.turns.order_by("index").last().state["loop"]
    assert rebuilt["coder"] == final["coder_history"]
    assert rebuilt["reviewer"] == final["reviewer_history"]


# ---- a real worker, killed between rounds ---------------------------------------------------


@pytest.fixture
def clean_queue():
    with celery_app.connection_for_write() as broker:
        celery_app.control.purge(connection=broker)


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_coder_reviewer_run_survives_a_worker_killed_between_rounds(clean_queue):
    demo_policy_version()
    asked_again = threading.Event()  # the round-2 verdict is being asked
    killed = threading.Event()
    held = {"done": False}

    def second_verdict(body):
        # The first time, hold the request until the worker that sent it is dead.
        if not held["done"]:
            held["done"] = True
            asked_again.set()
            killed.wait(60)
        return chat_completion(REVIEWER, APPROVED)

    handler = chat_by_model(
        {
            CODER: [chat_completion(CODER, fenced(CODE_1)), chat_completion(CODER, fenced(CODE_2))],
            REVIEWER: [
                chat_completion(REVIEWER, verdict("CHANGES_REQUESTED", "subtracts")),
                second_verdict,
            ],
        }
    )
    second = None
    with serve(handler) as server:
        env = worker_env(GUARDIAN_TURN_LEASE_SECONDS="5", OPENAI_BASE_URL=f"{server.url}/v1")
        first = start_worker(**env)
        try:
            run = model_run()
            wait_for(asked_again.is_set, timeout=60, what="the round-2 verdict to be asked")
            first.send_signal(signal.SIGKILL)  # the reviewer's turn is recorded, not decided
            first.wait(timeout=10)
            killed.set()
            waiting = run.turns.get(index=3)
            assert (waiting.proposal["step"], waiting.proposal["round"]) == ("reviewer", 2)
            assert not Decision.objects.filter(turn=waiting).exists()

            second = start_worker(**env)
            wait_for(
                lambda: status_of(run) != RunStatus.RUNNING,
                timeout=90,
                what="the run to finish on the second worker",
                poll=1.0,
                tick=run_sweep_stalled,
            )
        finally:
            killed.set()
            first_log = stop_worker(first)
            second_log = stop_worker(second) if second else ""
        requests = [r.json for r in server.requests]
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, first_log[-2000:] + second_log[-2000:]
    assert run.final_answer == CODE_2
    assert steps(run) == [("coder", 1), ("reviewer", 1), ("coder", 2), ("reviewer", 2)]
    assert outcomes(run) == ["continue", "continue", "continue", "stop_success"]
    by_model = {model: [r for r in requests if r["model"] == model] for model in (CODER, REVIEWER)}
    assert len(by_model[CODER]) == 2  # no round lost or doubled...
    assert len(by_model[REVIEWER]) == 3  # ...beyond the one request the kill cut off
    assert by_model[REVIEWER][1] == by_model[REVIEWER][2]  # asked again, exactly the same
