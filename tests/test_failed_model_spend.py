"""What a failed model call was billed counts toward the run's budgets: a truncated actor
reply fails the turn, and the next recorded turn's usage includes its tokens."""

import pytest

from demo.setup import demo_policy_version
from runs.models import Run, RunStatus, Turn
from runs.services import run_advance, run_start
from tests.adapters.servers import completion, serve

pytestmark = pytest.mark.django_db

MODEL = "actor-1"


def test_a_truncated_actor_reply_is_counted_by_the_next_turn(settings):
    demo_policy_version()
    replies = [
        completion(model=MODEL, content="The order ships on Tues", finish_reason="length",
                   total_tokens=500),
        completion(model=MODEL, content="The order ships on Tuesday.", total_tokens=40),
    ]  # fmt: skip

    with serve(lambda path, headers, body: (200, replies.pop(0), 0)) as server:
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        run = run_start(
            goal="Tell the customer when order ord_1001 ships.",
            tools=["read_order"],
            actor="openai",
            guardian="scripted",
            config={
                "actor_model": MODEL,
                "scenario": {
                    "name": "spend",
                    "goal": "g",
                    "actor": {"turns": []},
                    "guardian": {"turns": [{"goal_reached": 0.97}]},
                },
            },
        )
        assert run_advance(run_id=run.pk) == "failed"  # truncated: no proposal
        run.refresh_from_db()
        assert run.unbilled == {"tokens": 500, "cost": 0.0}
        assert run_advance(run_id=run.pk) == "finished"

    run = Run.objects.get(pk=run.pk)
    assert run.status == RunStatus.SUCCEEDED
    assert Turn.objects.get(run=run, index=0).usage["tokens"] == 540
    assert run.unbilled == {}


def test_a_truncated_reviewer_reply_is_counted_by_the_next_step(settings):
    from tests.adapters.servers import chat_completion
    from tests.test_review_rounds import APPROVED, CODE_2, CODER, REVIEWER, fenced, model_run

    answers = {"reviewer": 0}

    def handler(path, headers, body):
        if body["model"] == CODER:
            return 200, chat_completion(CODER, fenced(CODE_2)), 0.0  # 120 tokens
        answers["reviewer"] += 1
        if answers["reviewer"] == 1:  # cut off at its limit: 1000 tokens, paid for
            return (
                200,
                chat_completion(
                    REVIEWER, "{", finish_reason="length", prompt_tokens=900, completion_tokens=100
                ),
                0.0,
            )
        return 200, chat_completion(REVIEWER, APPROVED), 0.0  # 120 tokens

    with serve(handler) as server:
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        run = model_run()
        assert [run_advance(run_id=run.pk) for _ in range(3)] == [
            "continued",
            "failed",
            "finished",
        ]  # fmt: skip
    last = Turn.objects.filter(run=run).order_by("-index").first()
    assert last.usage["tokens"] == 120 + 1000 + 120
    assert Run.objects.get(pk=run.pk).unbilled == {}
