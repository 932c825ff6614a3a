"""The turn replay and probe pages say the true reason a turn cannot be put to the guardian
again, say plainly when the guardian is scripted, offer "Ask the guardian again" only where it
can work, and never call a guardian that failed again a reproduction (PostgreSQL)."""

import pytest
from django.urls import reverse

from runs.replay import guardian_replay
from tests.factories import make_decision, make_run, make_turn
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

ASK = "Ask the guardian again"
PROJECTION = {"goal": "Tell the customer when order ord_1 ships.", "last_results": ["Tuesday"]}


def probe_page(client, run, index, **params) -> str:
    response = client.get(reverse("runs:turn_probe", args=[run.pk, index]), params)
    assert response.status_code == 200
    return response.content.decode()


def replay_page(client, run, index, **params) -> str:
    response = client.get(reverse("runs:turn_replay", args=[run.pk, index]), params)
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def held_run():
    """refund_waits_for_approval: its refund step is held at the gate for a reviewer."""
    run = drive(start("refund_waits_for_approval"))
    held = run.turns.get(projection={})
    assert any(r["source"] == "gate" for r in held.decision.reasons)
    return run, held.index


@pytest.fixture
def review_run():
    run = drive(start("coder_reviewer_round_cap"))
    assert run.actor == "coder_reviewer"
    return run


# ---- 1. the probe page gives each kind of turn its own reason ---------------------------------


def test_the_probe_page_says_a_held_step_was_held_at_the_gate(client, auditor, held_run):
    run, index = held_run
    client.force_login(auditor)
    body = probe_page(client, run, index)
    assert "Nothing to probe on this turn: the step was held at the gate for a reviewer" in body
    assert "asked only each call&#x27;s risk" in body
    assert 'class="probe-form"' not in body


def test_the_probe_page_says_a_review_round_is_decided_by_the_reviewer(client, auditor, review_run):
    client.force_login(auditor)
    body = probe_page(client, review_run, 0)
    why = "Nothing to probe on this turn: a coder ⇄ reviewer round is decided by the reviewer"
    assert why in body
    assert "held" not in body
    assert 'class="probe-form"' not in body


def test_the_probe_page_says_an_undecided_turn_has_no_decision_yet(client, auditor):
    turn = make_turn(projection=PROJECTION)
    client.force_login(auditor)
    body = probe_page(client, turn.run, turn.index)
    assert "Nothing to probe on this turn: the turn has no decision yet" in body
    assert "held" not in body


def test_the_probe_page_says_a_decided_turn_without_a_projection_logged_none(client, auditor):
    turn = make_turn()
    make_decision(turn=turn)
    client.force_login(auditor)
    body = probe_page(client, turn.run, turn.index)
    assert "Nothing to probe on this turn: the turn&#x27;s log holds no projection" in body
    assert "held" not in body


# ---- 2. a scripted guardian is named before anyone probes -------------------------------------


def test_the_probe_page_says_a_scripted_guardian_cannot_move_before_probing(client, auditor):
    run = drive(start("goal_reached"))
    turn = run.turns.exclude(projection={}).order_by("index").first()
    client.force_login(auditor)
    body = probe_page(client, run, turn.index)
    note = body.index("This run's guardian is scripted")
    assert note < body.index('class="probe-form"')
    assert "no edit here can move a probability or the outcome" in body
    assert "run_scenario goal_reached</code>, the demo's default" in body

    probed = probe_page(client, run, turn.index, probe="1", goal="Delete every account.")
    assert "What would move" in probed
    assert "Nothing moved because the scripted guardian answers from its script" in probed


def test_the_turn_replay_page_says_a_scripted_guardian_repeats_its_script(client, auditor):
    run = drive(start("goal_reached"))
    turn = run.turns.exclude(projection={}).order_by("index").first()
    client.force_login(auditor)
    body = replay_page(client, run, turn.index)
    assert body.index("This run's guardian is scripted") < body.index(ASK)
    assert "the log matches the script, not that a model judged the same way" in body


def test_a_guardian_that_reads_the_projection_gets_no_scripted_note(client, auditor):
    turn = make_turn(run=make_run(guardian="local"), projection=PROJECTION)
    make_decision(turn=turn)
    client.force_login(auditor)
    assert "is scripted" not in probe_page(client, turn.run, turn.index)
    body = replay_page(client, turn.run, turn.index)
    assert "is scripted" not in body
    assert ASK in body


# ---- 3. "Ask the guardian again" only where it can work ---------------------------------------


def test_a_held_turn_offers_no_ask_and_says_why(client, auditor, held_run):
    run, index = held_run
    client.force_login(auditor)
    body = replay_page(client, run, index)
    assert ASK not in body
    assert "Not offered on this turn: the step was held at the gate" in body
    assert reverse("runs:turn_probe", args=[run.pk, index]) not in body
    # Asking anyway by address asks nothing and gives the same reason.
    asked = replay_page(client, run, index, ask="1")
    assert "Not offered on this turn: the step was held at the gate" in asked
    assert "Not available" not in asked


def test_a_review_round_offers_no_ask_and_says_why(client, auditor, review_run):
    client.force_login(auditor)
    body = replay_page(client, review_run, 0)
    assert ASK not in body
    assert "Not offered on this turn: a coder ⇄ reviewer round is decided by the reviewer" in body


def test_a_turn_without_a_projection_offers_no_ask_and_says_why(client, auditor):
    turn = make_turn()
    make_decision(turn=turn)
    client.force_login(auditor)
    body = replay_page(client, turn.run, turn.index)
    assert ASK not in body
    assert "Not offered on this turn: the turn&#x27;s log holds no projection" in body


# ---- 4. a failure is not a reproduction -------------------------------------------------------


@pytest.fixture
def timed_out_turn(settings):
    """guardian_timeout: its script makes the guardian time out on turn 0, so the log holds
    five malformed "timed out" answers and the run waits for a person."""
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3
    run = drive(start("guardian_timeout"))
    turn = run.turns.get(index=0)
    assert turn.projection
    assert all("malformed" in answer for answer in turn.decision.answers.values())
    return run, turn.index


def test_a_guardian_that_times_out_again_is_failed_again_not_identical(timed_out_turn):
    run, index = timed_out_turn
    replay = guardian_replay(run=run, index=index)
    assert replay.available
    assert [p.condition for p in replay.failures] == [
        "integrity",
        "infeasible",
        "goal_reached",
        "drift",
        "stagnation",
    ]
    assert replay.failed_again
    assert not replay.identical
    assert replay.failure_text == (
        "guardian timed out after 0.3 s "
        "(Injected instructions, Infeasible, Goal reached, Drift, Stagnation)"
    )


def test_the_turn_replay_page_says_the_guardian_failed_again_and_how(
    client, auditor, timed_out_turn
):
    run, index = timed_out_turn
    client.force_login(auditor)
    body = replay_page(client, run, index, ask="1")
    guardian = body[body.index('id="guardian-title"') :]
    assert "reproduced exactly" not in guardian
    assert "<strong>Identical</strong>" not in guardian
    failed = "<strong>Failed again</strong>: the guardian gave no usable answer, as on the"
    assert failed in body
    assert "guardian timed out after 0.3 s (Injected instructions, Infeasible, Goal" in body
    assert "A failure is not a reproduction" in body


def test_a_guardian_that_fails_where_the_log_has_answers_is_failed(client, auditor):
    run = drive(start("goal_reached"))
    turn = run.turns.exclude(projection={}).order_by("index").first()

    class Broken:
        model_version = turn.decision.guardian_model_version

        def answer(self, projection, conditions):
            raise ConnectionError("the model server hung up")

    replay = guardian_replay(run=run, index=turn.index, guardian=Broken())
    assert not replay.identical
    assert not replay.failed_again
    assert "guardian failed: ConnectionError: the model server hung up" in replay.failure_text
    assert replay.new_outcome == "escalate"  # fail closed
