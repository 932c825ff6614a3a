"""Decision replay, guardian replay and the counterfactual probe, on real runs."""

import pytest
from django.core.management import call_command
from django.urls import reverse

from escalations.models import EscalationStatus
from escalations.verdicts import escalation_resolve
from runs.models import Decision, Turn
from runs.replay import (
    DIFFERENT,
    IDENTICAL,
    NOT_REPLAYABLE,
    ProbeEdits,
    ProbeInputError,
    guardian_replay,
    run_replay,
    turn_probe,
)
from tests.factories import json_placeholder, tamper, tamper_rows
from tests.runs_helpers import drive, scripted_names, start

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", [n for n in scripted_names() if n != "coder_reviewer_round_cap"])
def test_every_turn_of_each_demo_scenario_replays_identical(name, settings):
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3  # the timeout scenario waits out one deadline
    run = drive(start(name))
    results = list(run_replay(run=run))
    assert len(results) == Decision.objects.filter(turn__run=run).count() > 0
    assert [r.differences for r in results if r.status != IDENTICAL] == []


def test_runs_resumed_after_an_approval_and_after_an_answer_replay_identical(reviewer, settings):
    """The logged decision of an escalated turn is the guardian's; the verdict's own
    recomputation (escalations.verdicts) is not in the log and is not what replay checks."""
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3  # the timeout scenario waits out one deadline
    approved = drive(start("refund_waits_for_approval"))
    _resolve(approved, reviewer, decision="approve")
    approved = drive(approved)
    answered = drive(start("guardian_timeout"))
    answer = {
        "integrity": False,
        "infeasible": False,
        "goal_reached": False,
        "drift": 4,
        "stagnation": False,
    }
    _resolve(answered, reviewer, decision="answer", answer=answer)
    answered = drive(answered)
    for run in (approved, answered):
        assert [r.differences for r in run_replay(run=run) if r.status != IDENTICAL] == []
    assert approved.turns.count() >= 3


def _resolve(run, user, **kwargs):
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    return escalation_resolve(escalation_id=escalation.pk, reviewer=user, **kwargs)


def test_coder_reviewer_rounds_are_counted_not_replayable():
    run = drive(start("coder_reviewer_round_cap"))
    results = list(run_replay(run=run))
    assert results
    assert {r.status for r in results} == {NOT_REPLAYABLE}


def test_the_replay_command_prints_each_turn_and_exits_zero(capsys):
    run = drive(start("drifting_agent"))
    call_command("replay", str(run.pk))
    out = capsys.readouterr().out
    assert f"run {run.pk} turn 0: identical" in out
    assert "5 decisions replayed" in out
    assert "0 different" in out


def test_a_tampered_answer_is_named_with_its_run_and_turn_and_exits_one(capsys):
    run = drive(start("goal_reached"))
    last = run.turns.order_by("-index").first()
    decision = Decision.objects.get(turn=last)
    assert decision.outcome == "stop_success"
    tamper_rows(
        Decision.objects.filter(pk=decision.pk), answers=decision.answers | {"goal_reached": 0.01}
    )
    with pytest.raises(SystemExit) as exit_:
        call_command("replay", str(run.pk))
    assert exit_.value.code == 1
    captured = capsys.readouterr()
    assert f"run {run.pk} turn {last.index}: DIFFERENT: outcome: stop_success → continue" in (
        captured.err
    )
    results = {r.turn_index: r for r in run_replay(run=run)}
    assert results[last.index].status == DIFFERENT
    assert "stop reason: goal_reached → —" in results[last.index].differences
    assert all(r.status == IDENTICAL for i, r in results.items() if i != last.index)


def test_replay_all_names_the_tampered_run_among_others(capsys):
    good = drive(start("drifting_agent"))
    bad = drive(start("stagnating_agent"))
    decision = Decision.objects.filter(turn__run=bad).order_by("turn__index").first()
    tamper("UPDATE runs_decision SET outcome = 'escalate' WHERE id = %s", [decision.pk])
    with pytest.raises(SystemExit) as exit_:
        call_command("replay", "--all")
    assert exit_.value.code == 1
    out = capsys.readouterr().out
    assert f"run {bad.pk} turn {decision.turn.index}: DIFFERENT" in out
    assert f"run {good.pk} " not in out


def test_replay_needs_a_run_or_all():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="RUN_ID or --all"):
        call_command("replay")


def test_replay_of_a_whole_run_is_one_query(django_assert_max_num_queries):
    run = drive(start("drifting_agent"))
    with django_assert_max_num_queries(2):  # the policy version is cached per process
        list(run_replay(run=run))


# ---- guardian replay and the counterfactual probe ------------------------------------------


@pytest.fixture(scope="module")
def local_guardian_trained():
    from guardian_core.adapters.local import LocalGuardian

    LocalGuardian().warm()


def test_the_local_guardian_reproduces_its_logged_probabilities_exactly(local_guardian_trained):
    run = drive(start("goal_reached", guardian="local"))
    asked = [t.index for t in run.turns.order_by("index") if t.projection]
    assert asked
    for index in asked:
        replay = guardian_replay(run=run, index=index)
        assert replay.available, replay.why_not
        assert replay.model_version == replay.logged_model_version
        assert [(p.condition, p.old, p.new) for p in replay.conditions if not p.same] == []
        assert all(p.old is not None for p in replay.conditions)
        assert replay.new_outcome == replay.old_outcome


def test_a_held_step_has_no_guardian_projection_to_replay():
    run = drive(start("refund_waits_for_approval"))
    held = run.turns.get(projection={})
    replay = guardian_replay(run=run, index=held.index)
    assert not replay.available
    assert "held at the gate" in replay.why_not
    assert "asked only each call's risk" in replay.why_not


def test_a_scripted_guardian_of_another_version_is_not_compared():
    run = drive(start("goal_reached"))
    last = Turn.objects.filter(run=run).order_by("-index").first()

    class Other:
        model_version = "another-model"

        def answer(self, projection, conditions):
            raise AssertionError("must not be asked")

    replay = guardian_replay(run=run, index=last.index, guardian=Other())
    assert not replay.available
    assert "no longer available" in replay.why_not


def test_a_probe_moves_the_probabilities_and_writes_nothing(local_guardian_trained):
    run = drive(start("injected_instruction", guardian="local"))
    turn = next(t for t in run.turns.order_by("index") if t.projection.get("last_results"))
    rows = Decision.objects.count(), Turn.objects.count()
    probe = turn_probe(run=run, index=turn.index, edits=ProbeEdits(drop_results=(0,)))
    assert probe.available
    integrity = next(p for p in probe.conditions if p.condition == "integrity")
    assert integrity.old is not None
    assert integrity.new is not None
    assert integrity.new != integrity.old
    assert (Decision.objects.count(), Turn.objects.count()) == rows


def test_a_probe_edit_that_does_not_fit_names_every_bad_field():
    run = drive(start("goal_reached"))
    turn = run.turns.exclude(projection={}).order_by("index").first()
    with pytest.raises(ProbeInputError) as error:
        turn_probe(
            run=run,
            index=turn.index,
            edits=ProbeEdits(drop_results=(9,), goal=" ", arguments=[1], has_arguments=True),
        )
    message = str(error.value)
    assert "drop_result: no tool result 9" in message
    assert "goal: must not be empty" in message
    assert "arguments: must be a JSON object" in message


def test_the_probe_command_prints_old_and_new_per_condition(capsys, local_guardian_trained):
    run = drive(start("goal_reached", guardian="local"))
    turn = run.turns.exclude(projection={}).order_by("index").first()
    call_command("probe", str(run.pk), str(turn.index), "--goal", "Delete every account.")
    out = capsys.readouterr().out
    assert "integrity" in out
    assert "goal_reached" in out
    assert "outcome:" in out


# ---- the pages ------------------------------------------------------------------------------


def test_the_replay_page_lists_every_turn_identical(client, auditor):
    run = drive(start("drifting_agent"))
    client.force_login(auditor)
    response = client.get(reverse("runs:replay", args=[run.pk]))
    assert response.status_code == 200
    body = response.content.decode()
    assert "<strong>5</strong> identical, <strong>0</strong> different" in body
    assert reverse("runs:turn_replay", args=[run.pk, 4]) in body


def test_the_replay_page_pages_by_turn_index(client, auditor, monkeypatch):
    monkeypatch.setattr("runs.replay_views.REPLAY_PAGE_SIZE", 2)
    run = drive(start("drifting_agent"))
    client.force_login(auditor)
    first = client.get(reverse("runs:replay", args=[run.pk])).content.decode()
    assert "?from=2" in first
    second = client.get(reverse("runs:replay", args=[run.pk]), {"from": "2"}).content.decode()
    assert "<strong>2</strong> identical" in second
    assert "?from=4" in second


def test_the_turn_replay_page_shows_a_tampered_turn_different(client, auditor):
    run = drive(start("goal_reached"))
    last = run.turns.order_by("-index").first()
    decision = Decision.objects.get(turn=last)
    tamper_rows(
        Decision.objects.filter(pk=decision.pk), answers=decision.answers | {"goal_reached": 0.01}
    )
    client.force_login(auditor)
    body = client.get(reverse("runs:turn_replay", args=[run.pk, last.index])).content.decode()
    assert "<strong>Different</strong>: outcome: stop_success → continue" in body
    assert "Ask the guardian again" in body


def test_the_turn_replay_page_asks_the_local_guardian_again(
    client, auditor, local_guardian_trained
):
    run = drive(start("goal_reached", guardian="local"))
    turn = run.turns.exclude(projection={}).order_by("index").first()
    client.force_login(auditor)
    url = reverse("runs:turn_replay", args=[run.pk, turn.index])
    body = client.get(url, {"ask": "1"}).content.decode()
    assert "every probability is reproduced exactly" in body


def test_the_probe_page_escapes_the_goal_and_names_bad_arguments(client, auditor):
    run = drive(start("goal_reached"))
    turn = run.turns.exclude(projection={}).order_by("index").first()
    client.force_login(auditor)
    url = reverse("runs:turn_probe", args=[run.pk, turn.index])
    body = client.get(url).content.decode()
    assert 'name="drop_result"' in body or "No tool result" in body
    response = client.get(
        url, {"probe": "1", "goal": "<script>alert(1)</script>", "drop_result": "x9"}
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "<script>alert(1)</script>" not in body
    assert "drop_result: &#x27;x9&#x27; is not a result number" in body


def test_the_probe_page_shows_what_would_move(client, auditor, local_guardian_trained):
    run = drive(start("injected_instruction", guardian="local"))
    turn = next(t for t in run.turns.order_by("index") if t.projection.get("last_results"))
    client.force_login(auditor)
    url = reverse("runs:turn_probe", args=[run.pk, turn.index])
    body = client.get(
        url, {"probe": "1", "goal": turn.projection["goal"], "drop_result": "0"}
    ).content.decode()
    assert "What would move" in body
    assert 'class="probe-moved"' in body


# ---- a malformed row is a difference, named, and the replay goes on (issue 22, item 3) ----


def _malform_first_decision(run, column: str = "answers", value: str = "[]") -> int:
    decision = Decision.objects.filter(turn__run=run).order_by("turn__index").first()
    tamper(
        f"UPDATE runs_decision SET {column} = {json_placeholder()} WHERE id = %s",
        [value, decision.pk],
    )
    return decision.turn.index


@pytest.mark.parametrize(
    ("column", "value", "named"),
    [
        ("answers", "[]", "answers is not an object"),
        ("reasons", '{"x": 1}', "reasons is not a list of reasons"),
        ("fired", '["no_such_condition"]', "fired is not a list of conditions"),
        ("call_signatures", '"x"', "call_signatures is not a list of texts"),
    ],
)
def test_a_malformed_decision_is_a_named_difference_and_the_replay_goes_on(column, value, named):
    run = drive(start("goal_reached"))
    index = _malform_first_decision(run, column, value)
    results = list(run_replay(run=run))
    assert len(results) == run.turns.count()  # every turn, the ones after it included
    bad = results[0]
    assert bad.turn_index == index
    assert bad.status == DIFFERENT
    assert f"malformed log row: {named}" in bad.differences


def test_replay_all_goes_on_past_a_malformed_run_and_names_it(capsys):
    bad = drive(start("goal_reached"))
    later = drive(start("drifting_agent"))
    index = _malform_first_decision(bad)
    later_tampered = Decision.objects.filter(turn__run=later).order_by("turn__index").first()
    tamper("UPDATE runs_decision SET outcome = 'escalate' WHERE id = %s", [later_tampered.pk])
    with pytest.raises(SystemExit) as exit_:
        call_command("replay", "--all")
    assert exit_.value.code == 1
    out = capsys.readouterr().out
    assert f"run {bad.pk} turn {index}: DIFFERENT: malformed log row: answers is not an object" in (
        out
    )
    # The run after the malformed one was checked too.
    assert f"run {later.pk} turn {later_tampered.turn.index}: DIFFERENT" in out


def test_the_replay_pages_answer_200_with_a_malformed_turn_named(client, auditor):
    run = drive(start("goal_reached"))
    index = _malform_first_decision(run)
    tamper(
        f"UPDATE runs_turn SET projection = {json_placeholder()} "
        'WHERE run_id = %s AND "index" = %s',
        ["[1]", run.pk, index],
        tables=("runs_turn",),
    )
    client.force_login(auditor)
    pages = {
        "run": client.get(reverse("runs:replay", args=[run.pk])),
        "turn": client.get(reverse("runs:turn_replay", args=[run.pk, index])),
        "asked": client.get(reverse("runs:turn_replay", args=[run.pk, index]) + "?ask=1"),
        "probe": client.get(reverse("runs:turn_probe", args=[run.pk, index]) + "?goal=x"),
    }
    assert {name: page.status_code for name, page in pages.items()} == dict.fromkeys(pages, 200)
    assert "answers is not an object" in pages["run"].content.decode()
    assert "answers is not an object" in pages["turn"].content.decode()
    assert "malformed" in pages["probe"].content.decode()
