"""What the user said mid-run is part of the loop state: recorded in the history as
"user said: …" before the step it came with, bounded like any history item, and shown to the
risk check and to the guardian."""

from dataclasses import replace

from guardian_core.engine.canonical import canonical_json
from guardian_core.engine.loop import Proposal, proposal_as_text, run_turn
from guardian_core.engine.state import (
    HISTORY_WINDOW,
    TRUNCATION_MARK,
    USER_MESSAGE_SUMMARY_CHARS,
    HistoryItem,
    LoopState,
    project,
    state_hash,
    state_rebuild,
    user_message_item,
)
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
POLICY = default_policy()


class RiskSeen(ScriptedGuardian):
    """A scripted guardian that keeps the projections of the risk question too."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.risk_seen: list = []

    def assess_risk(self, projections):
        self.risk_seen.extend(projections)
        return super().assess_risk(projections)


def turn(proposal: Proposal, guardian, *, state=GOAL, index=0):
    return run_turn(
        state,
        run_id="run-1",
        index=index,
        actor=ScriptedActor([proposal]),
        guardian=guardian,
        tools=desk(Ledger()),
        clock=FakeClock(),
        policy=POLICY,
    )


def summaries(history) -> list[str]:
    return [item["summary"] if isinstance(item, dict) else item.summary for item in history]


def test_a_user_message_reads_user_said_and_its_text():
    assert user_message_item(3, "Yes, refund it to the card.") == HistoryItem(
        3, "user said: Yes, refund it to the card."
    )


def test_a_user_message_is_one_line_and_a_long_one_is_cut_and_marked():
    item = user_message_item(0, "my order is\nord_4472\n\n  thanks")
    assert item.summary == "user said: my order is ord_4472 thanks"

    long = user_message_item(0, "word " * 2000)
    assert long.summary.startswith("user said: word word")
    assert long.summary.endswith(TRUNCATION_MARK)
    assert len(long.summary) == len("user said: ") + USER_MESSAGE_SUMMARY_CHARS


def test_a_step_records_what_the_user_said_before_its_own_item_in_order():
    proposal = replace(
        step(call("read_order", order_id="ord_4472")),
        user_messages=("It is order ord_4472.", "It arrived broken."),
    )
    record = turn(proposal, ScriptedGuardian([CALM]), index=2)

    assert summaries(record.state_after.history) == [
        "user said: It is order ord_4472.",
        "user said: It arrived broken.",
        "turn 2: read_order done",
    ]
    assert [item.turn for item in record.state_after.history] == [2, 2, 2]
    # The recorded steps rebuild the same state, hash included: replay reads them back.
    rebuilt = state_rebuild(GOAL, record.state_steps)
    assert rebuilt == record.state_after
    assert state_hash(rebuilt) == record.state_hash_after


def test_the_risk_check_and_the_guardian_see_what_the_user_said():
    proposal = replace(
        step(call("issue_refund", order_id="ord_4472", amount=49.9)),
        user_messages=("Yes, go ahead with the refund of 49.90.",),
    )
    guardian = RiskSeen([CALM], risk={"issue_refund": {"irreversible": 1.0}})
    held = turn(proposal, guardian)
    [risk_projection] = guardian.risk_seen
    assert "user said: Yes, go ahead with the refund of 49.90." in summaries(
        risk_projection["history"]
    )
    assert held.risk_projections == (risk_projection,)

    guardian = ScriptedGuardian([CALM])
    record = turn(
        replace(step(call("read_order", order_id="ord_4472")), user_messages=("Thanks!",)),
        guardian,
    )
    assert summaries(guardian.asked[0]["history"])[-2:] == [
        "user said: Thanks!",
        "turn 0: read_order done",
    ]
    assert record.guardian_projection == guardian.asked[0]


def test_without_user_messages_a_step_makes_the_state_it_always_made():
    proposal = step(call("read_order", order_id="ord_4472"))
    with_none = turn(replace(proposal, user_messages=()), ScriptedGuardian([CALM]))
    assert with_none.state_steps[0]["add_history"] == []
    assert summaries(with_none.state_after.history) == ["turn 0: read_order done"]


def test_user_messages_are_bounded_by_the_window_and_the_projection_budget():
    chatty = replace(
        step(message="Could you confirm?"),
        user_messages=tuple(f"message {i}: " + "x" * 1000 for i in range(20)),
    )
    record = turn(chatty, ScriptedGuardian([CALM]))
    state = record.state_after
    assert len(state.history) == HISTORY_WINDOW
    assert state.history_dropped == 21 - HISTORY_WINDOW
    assert summaries(state.history)[-1] == "turn 0: no tool call; said: Could you confirm?"
    assert all(
        len(item.summary) <= len("user said: ") + USER_MESSAGE_SUMMARY_CHARS
        for item in state.history
    )

    projection = project(state, max_chars=1500)
    assert len(canonical_json(projection.data)) <= 1500
    kept = summaries(projection.data["history"])
    assert kept[-1] == "turn 0: no tool call; said: Could you confirm?"  # the newest stays
    assert projection.data["truncated"]["history_dropped"] == 21 - len(kept)


def test_text_no_database_takes_is_replaced_in_what_the_user_said():
    proposal = proposal_as_text(Proposal(calls=(), user_messages=("a\x00b", "c\ud800d")))
    assert proposal.user_messages == ("a\ufffdb", "c\ufffdd")


def test_a_scripted_actor_says_what_the_user_said_and_a_bad_entry_is_named():
    from guardian_core.adapters.scripted import ScriptedActor as Script
    from guardian_core.adapters.scripted import scenario_problems

    scenario = {
        "name": "chat",
        "goal": "g",
        "actor": {"turns": [{"calls": [], "user_messages": ["It is ord_4472."]}]},
    }
    assert Script(scenario).propose(project(GOAL).data).user_messages == ("It is ord_4472.",)

    scenario["actor"]["turns"][0]["user_messages"] = ["fine", 7, ""]
    assert scenario_problems(scenario) == [
        "scenario.actor.turns[0].user_messages[1]: 7 is not of type 'string'",
        "scenario.actor.turns[0].user_messages[2]: '' should be non-empty",
    ]
