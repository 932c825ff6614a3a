"""The second-tier judge on the uncertain band, in the engine: what it is asked, what settles,
what still goes to a person, and that the decision is a function of the two logged answers."""

from dataclasses import dataclass, field

import pytest

from guardian_core.engine.conditions import Condition, Malformed
from guardian_core.engine.judge import decide_judged, judgements
from guardian_core.engine.loop import run_turn
from guardian_core.engine.policy import POST_EXECUTION_CONDITIONS, Outcome, decide
from guardian_core.engine.state import LoopState
from guardian_core.engine.thresholds import default_policy
from tests.engine.fakes import (
    CALM,
    FakeClock,
    Ledger,
    ScriptedActor,
    ScriptedGuardian,
    call,
    desk,
    step,
)

GOAL = LoopState(goal="Refund order ord_4472", acceptance_criteria=("Refund issued",))
POLICY = default_policy()  # goal_reached: t* 0.80, band [0.75, 0.85]; integrity [0.05, 0.15]
IN_BAND = {**CALM, "goal_reached": 0.79}
ALL_JUDGEABLE = ("integrity", "infeasible", "goal_reached", "drift", "stagnation")


@dataclass
class ScriptedJudge:
    """Answers per condition; records what it was asked. `slow` advances the clock."""

    answers: dict = field(default_factory=dict)
    fail: Exception | None = None
    clock: FakeClock | None = None
    slow_seconds: float = 0.0
    model_version: str = "judge-7b-2026-11"
    asked: list[tuple[dict, Condition]] = field(default_factory=list)

    def judge(self, projection, condition):
        self.asked.append((projection, Condition(condition)))
        if self.clock is not None and self.slow_seconds:
            self.clock.ticks += int(self.slow_seconds * 100)
        if self.fail is not None:
            raise self.fail
        return self.answers[Condition(condition).value]


def turn(guardian, judge, *, conditions=ALL_JUDGEABLE, proposal=None, clock=None, **kwargs):
    actor = ScriptedActor([proposal or step(call("read_order", order_id="ord_4472"))])
    return run_turn(
        GOAL,
        run_id="run-1",
        index=0,
        actor=actor,
        guardian=guardian,
        tools=desk(Ledger()),
        clock=clock or FakeClock(),
        policy=POLICY,
        judge=judge,
        judge_conditions=conditions,
        **kwargs,
    )


def reason_of(record, source: str):
    return next(r for r in record.decision.reasons if r.source == source)


def test_a_confident_judge_settles_a_band_answer_and_the_run_goes_on():
    judge = ScriptedJudge({"goal_reached": 0.03})
    record = turn(ScriptedGuardian([IN_BAND]), judge)

    assert record.decision.outcome == Outcome.CONTINUE
    assert [c for _, c in judge.asked] == [Condition.GOAL_REACHED]
    assert judge.asked[0][0] == record.guardian_projection  # shown what the guardian saw
    assert record.answers["goal_reached"] == 0.79  # the guardian's answer stays in the record
    assert record.judged == {"goal_reached": 0.03}
    assert record.judge_model_version == "judge-7b-2026-11"
    reason = reason_of(record, "goal_reached")
    assert (reason.band, reason.value) == ("clear", 0.03)
    assert "settled by the judge" in reason.detail
    assert "guardian's p=0.790" in reason.detail
    assert "judge" in record.timings


def test_a_judge_confident_the_other_way_settles_it_too():
    record = turn(ScriptedGuardian([IN_BAND]), ScriptedJudge({"goal_reached": 0.97}))

    assert record.decision.outcome == Outcome.STOP_SUCCESS
    assert record.decision.stop_reason == "goal_reached"


def test_an_uncertain_judge_sends_the_answer_to_a_person():
    record = turn(ScriptedGuardian([IN_BAND]), ScriptedJudge({"goal_reached": 0.81}))

    assert record.decision.outcome == Outcome.ESCALATE
    reason = reason_of(record, "goal_reached")
    assert (reason.band, reason.value) == ("uncertain", 0.79)
    assert "the judge's p=0.810 is in the band too: to a person" in reason.detail


def test_a_judge_that_fails_sends_the_answer_to_a_person():
    judge = ScriptedJudge(fail=TimeoutError("no reply"))
    record = turn(ScriptedGuardian([IN_BAND]), judge)

    assert record.decision.outcome == Outcome.ESCALATE
    assert isinstance(record.judged["goal_reached"], Malformed)
    assert "judge failed: TimeoutError" in reason_of(record, "goal_reached").detail


def test_a_late_judge_answer_counts_as_none():
    clock = FakeClock()
    judge = ScriptedJudge({"goal_reached": 0.03}, clock=clock, slow_seconds=30)
    record = turn(ScriptedGuardian([IN_BAND]), judge, clock=clock, judge_deadline_seconds=10)

    assert record.decision.outcome == Outcome.ESCALATE
    assert record.judged["goal_reached"] == Malformed("judge answered after its 10 s deadline")


@pytest.mark.parametrize("bad", [1.7, "no", None, {"yes": 0.5}])
def test_a_malformed_judge_answer_sends_the_answer_to_a_person(bad):
    record = turn(ScriptedGuardian([IN_BAND]), ScriptedJudge({"goal_reached": bad}))

    assert record.decision.outcome == Outcome.ESCALATE
    assert "the judge gave no usable answer" in reason_of(record, "goal_reached").detail


def test_only_the_band_answers_of_configured_conditions_are_asked():
    answers = {**CALM, "goal_reached": 0.79, "integrity": 0.1, "stagnation": 0.52}
    judge = ScriptedJudge({"goal_reached": 0.02, "stagnation": 0.1})
    record = turn(ScriptedGuardian([answers]), judge, conditions=["goal_reached", "stagnation"])

    assert [c.value for _, c in judge.asked] == ["goal_reached", "stagnation"]
    # integrity is in its band but not configured: a person decides it.
    assert record.decision.outcome == Outcome.ESCALATE
    assert [r.source for r in record.decision.triggered] == ["integrity"]


def test_a_drift_distribution_in_the_band_can_be_settled():
    in_band = {"0": 0.25, "1": 0.25, "2": 0.2, "3": 0.2, "4": 0.1}  # P(score ≤ 1) = 0.5
    aligned = {"0": 0.0, "1": 0.02, "2": 0.08, "3": 0.3, "4": 0.6}
    record = turn(ScriptedGuardian([{**CALM, "drift": in_band}]), ScriptedJudge({"drift": aligned}))

    assert record.decision.outcome == Outcome.CONTINUE
    assert reason_of(record, "drift").value == pytest.approx(0.02)


def test_confident_or_malformed_guardian_answers_never_reach_the_judge():
    judge = ScriptedJudge({})
    failed = {**CALM, "goal_reached": Malformed("guardian failed: timeout")}
    assert turn(ScriptedGuardian([CALM]), judge).decision.outcome == Outcome.CONTINUE
    assert turn(ScriptedGuardian([failed]), judge).decision.outcome == Outcome.ESCALATE
    assert judge.asked == []


def test_a_risk_answer_in_the_band_holds_the_step_and_the_judge_is_never_asked():
    judge = ScriptedJudge({"risk": {"read_only": 1.0}})
    band_risk = {"read_only": 0.9, "reversible_write": 0.0, "irreversible": 0.1, "regulated": 0.0}
    guardian = ScriptedGuardian([], risk={"read_order": band_risk})
    record = turn(guardian, judge, conditions=[*ALL_JUDGEABLE, "risk"])

    assert record.decision.outcome == Outcome.ESCALATE
    assert [c.status for c in record.calls] == ["held"]
    assert [r.source for r in record.decision.triggered] == ["gate"]
    assert judge.asked == []
    assert record.judged == {}


def test_an_irreversible_call_goes_to_a_person_without_the_judge():
    judge = ScriptedJudge({})
    refund = step(call("issue_refund", order_id="ord_4472", amount=49.9))
    record = turn(ScriptedGuardian([]), judge, proposal=refund, conditions=ALL_JUDGEABLE)

    assert record.decision.outcome == Outcome.ESCALATE
    assert [c.status for c in record.calls] == ["held"]
    assert judge.asked == []


def test_the_judges_spend_counts_against_the_budgets():
    @dataclass
    class Spend:
        tokens: int = 0
        cost: float = 0.0

    class PayingJudge(ScriptedJudge):
        def judge(self, projection, condition):
            self.spend.tokens += 500
            self.spend.cost += 0.01
            return super().judge(projection, condition)

    judge = PayingJudge({"goal_reached": 0.03})
    judge.spend = Spend()
    record = turn(ScriptedGuardian([IN_BAND]), judge)

    assert record.usage.tokens == 10 + 500
    assert record.usage.cost == pytest.approx(0.01)


def test_the_decision_is_a_function_of_the_logged_answers():
    answers = {**CALM, "goal_reached": 0.79, "integrity": 0.12}
    judge = ScriptedJudge({"goal_reached": 0.03, "integrity": 0.11})
    record = turn(ScriptedGuardian([answers]), judge)

    again = decide_judged(
        record.answers,
        record.judged,
        POLICY,
        (),
        record.usage,
        calls=record.past_turn.calls,
        conditions=POST_EXECUTION_CONDITIONS,
    )
    assert again == record.decision
    assert [j.settled for j in judgements(record.answers, record.judged, POLICY)] == [
        False,  # integrity: the judge's 0.11 is in the band too
        True,
    ]


def test_a_logged_judge_answer_cannot_overrule_a_confident_guardian():
    answers = {**CALM, "goal_reached": 0.1}  # clear: nothing to judge
    judged = {"goal_reached": 0.99, "risk": {"read_only": 1.0}}

    assert decide_judged(answers, judged, POLICY) == decide(answers, POLICY)
    assert judgements(answers, judged, POLICY) == ()


def test_without_judge_answers_it_is_exactly_decide():
    assert decide_judged(IN_BAND, {}, POLICY) == decide(IN_BAND, POLICY)
