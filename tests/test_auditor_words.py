"""The auditors' pages speak one vocabulary and state true figures: the question set the guardian
was asked, conditions and outcomes in the run page's words on the replay and probe pages (the
code beside them, muted, to match the export), a probe offered only where there is something to
probe, escalation summaries in words, times to the second, exact-match filters said as such."""

import re
from datetime import UTC, datetime

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.replay import turn_not_probeable
from runs.vocabulary import band_words, outcome_words, summary_words
from tests.factories import (
    make_decision,
    make_escalation,
    make_policy_version,
    make_run,
    make_turn,
)
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db


def get(client, name: str, *args, **params) -> str:
    response = client.get(reverse(name, args=args), params)
    assert response.status_code == 200
    return response.content.decode()


def cells(row: str) -> list[str]:
    return re.findall(r"<td>(.*?)</td>", row, re.DOTALL)


# ---- 1. the question set the guardian was asked ---------------------------------------------


def test_the_run_page_shows_the_question_set_the_guardian_logged_beside_the_policys(
    client, auditor
):
    run = make_run(policy_version=make_policy_version(question_set_version="policy-qs-1"))
    make_decision(turn=make_turn(run=run, index=0), question_set_version="guardian-qs-7")
    client.force_login(auditor)

    html = get(client, "runs:detail", run.pk)

    asked = html[html.index("<dt>Question set asked</dt>") :]
    asked = asked[: asked.index("</dd>")]
    assert "<code>guardian-qs-7</code>" in asked
    assert "policy-qs-1" not in asked
    policy = html[html.index("<dt>Policy version</dt>") :]
    assert "its question set</span> <code>policy-qs-1</code>" in policy[: policy.index("</dd>")]


def test_a_scripted_run_says_it_asked_the_scripted_question_set(client, auditor):
    run = drive(start("goal_reached"))
    client.force_login(auditor)

    html = get(client, "runs:detail", run.pk)

    asked = html[html.index("<dt>Question set asked</dt>") :]
    assert "<code>scripted-1</code>" in asked[: asked.index("</dd>")]


# ---- 2 and 3. one vocabulary on the replay and probe pages -----------------------------------


def test_a_held_turns_replay_says_no_condition_fired_and_the_gate_in_words(client, auditor):
    run = drive(start("refund_waits_for_approval"))
    held = run.turns.get(projection={})
    client.force_login(auditor)

    html = get(client, "runs:turn_replay", run.pk, held.index)

    assert '<th scope="row">Conditions fired</th><td>none</td><td>none</td>' in html
    assert "The gate is not a condition" in html
    assert "<strong>Gate</strong> (fired → Escalate)" in html
    # The code beside the words only where the words hide it: "Escalate" needs no "escalate".
    assert '<th scope="row">Outcome</th><td>Escalate</td><td>Escalate</td>' in html
    assert '<th scope="row">Fired</th>' not in html


def test_an_unchanged_outcome_reads_the_same_in_words_in_both_columns(client, auditor):
    run = drive(start("goal_reached"))
    last = run.turns.order_by("-index").first()
    assert last.decision.stop_reason == "goal_reached"
    client.force_login(auditor)

    html = get(client, "runs:replay", run.pk)

    row = re.search(rf'<tr class="replay-identical">\s*<td>{last.index}</td>(.*?)</tr>', html, re.S)
    logged, replayed = cells(row.group(1))[:2]
    assert logged == replayed
    assert logged.startswith("Stop with success — Goal reached ")
    assert '<code class="muted">stop_success · goal_reached</code>' in logged
    turn = get(client, "runs:turn_replay", run.pk, last.index)
    assert (
        '<th scope="row">Outcome</th><td>Stop with success <code class="muted">stop_success' in turn
    )
    assert "<strong>Goal reached</strong> (" in turn
    assert '<strong>Injected instructions</strong> <code class="muted">integrity</code>' in turn
    assert "<strong>integrity</strong>" not in turn


def test_the_probe_table_names_conditions_and_outcomes_in_words(client, auditor):
    run = drive(start("goal_reached"))
    last = run.turns.order_by("-index").first()
    client.force_login(auditor)

    html = get(client, "runs:turn_probe", run.pk, last.index, probe="1", goal="Another goal")

    table = html[html.index('<table class="probe-table">') :]
    table = table[: table.index("</table>")]
    assert (
        '<th scope="row">Injected instructions <code class="muted">integrity</code></th>' in table
    )
    outcome = table[table.index('<th scope="row">Outcome</th>') :]
    old, new, moved = cells(outcome)[:3]
    assert old == new
    assert old.startswith("Stop with success — Goal reached")
    assert moved == ""


# ---- 4. a guardian that gave no answer --------------------------------------------------------


def test_a_guardian_timeout_reads_as_no_usable_answer_not_malformed_twice(
    client, auditor, settings
):
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3
    run = drive(start("guardian_timeout"))
    client.force_login(auditor)

    html = get(client, "runs:detail", run.pk)

    assert "(malformed answer): malformed answer" not in html
    assert "Injected instructions (no usable answer): malformed answer (guardian timed out" in html
    assert band_words("malformed") == "no usable answer"


# ---- 5. no function names in words for people -------------------------------------------------


def test_a_review_round_is_not_replayable_by_the_threshold_policy_in_words(client, auditor):
    run = drive(start("coder_reviewer_round_cap"))
    client.force_login(auditor)

    html = get(client, "runs:replay", run.pk)

    assert "not by the threshold policy" in html
    assert "not by decide" not in html


# ---- 6. no link to a probe with nothing to probe ----------------------------------------------


def test_a_held_latest_turn_says_why_it_cannot_be_probed_instead_of_linking(client, auditor):
    run = drive(start("refund_waits_for_approval"))
    last = run.turns.order_by("-index").first()
    assert last.projection == {}
    client.force_login(auditor)

    html = get(client, "runs:detail", run.pk)

    assert reverse("runs:turn_probe", args=[run.pk, last.index]) not in html
    assert f"Turn {last.index} cannot be probed: held at the gate" in html
    # On a page of older turns the latest one is read from the log, to the same words.
    older = get(client, "runs:detail", run.pk, before=str(last.index))
    assert f"Turn {last.index} cannot be probed: held at the gate" in older


def test_a_review_run_offers_no_probe_and_a_probeable_turn_keeps_its_link(client, auditor):
    review = drive(start("coder_reviewer_round_cap"))
    plain = drive(start("goal_reached"))
    client.force_login(auditor)

    html = get(client, "runs:detail", review.pk)
    assert "cannot be probed: a coder ⇄ reviewer round" in html
    assert "/probe/" not in html
    last = plain.turns.order_by("-index").first()
    assert reverse("runs:turn_probe", args=[plain.pk, last.index]) in get(
        client, "runs:detail", plain.pk
    )
    assert turn_not_probeable(run=plain, turn_id=last.pk) == ""


# ---- 7. escalation summaries in words --------------------------------------------------------


def test_new_escalation_summaries_lead_with_words_and_join_reasons_cleanly(client, auditor):
    gated = drive(start("refund_waits_for_approval"))
    review = drive(start("coder_reviewer_round_cap"))

    gate_summary = gated.escalations.get().summary
    review_summary = review.escalations.get().summary

    assert gate_summary.startswith("Gate: call 0 issue_refund: irreversible")
    assert review_summary.startswith("Coder ⇄ reviewer: round cap reached after 2 rounds.")
    assert "Last reasons: " in review_summary
    assert ".;" not in review_summary
    assert "round_cap" not in review_summary


def test_summaries_stored_before_are_shown_in_words(client, auditor):
    run = make_run()
    turn = make_turn(run=run, index=0)
    make_decision(turn=turn)
    make_escalation(
        turn=turn,
        summary="Coder/reviewer loop: round_cap after 2 rounds: not collapsed.; Leading dash",
    )
    make_escalation(
        turn=turn,
        summary="gate: call 0 issue_refund: irreversible",
        status="cancelled",
        resolved_at=timezone.now(),
    )
    client.force_login(auditor)

    html = get(client, "runs:detail", run.pk)

    assert "Coder ⇄ reviewer: round cap reached after 2 rounds. Last reasons: not collapsed; " in (
        html
    )
    assert "Gate: call 0 issue_refund: irreversible" in html
    assert "round_cap" not in html
    assert "gate: call 0" not in html
    # Text that only looks like a code stays as it was written.
    assert summary_words("nothing: to see") == "nothing: to see"
    assert (
        outcome_words("stop_failure", "turn_cap")
        == "Stop with failure — Turn cap reached; no answer"
    )


def test_the_run_pages_probability_bars_name_conditions_in_words(client, auditor):
    run = drive(start("goal_reached"))
    client.force_login(auditor)

    html = get(client, "runs:detail", run.pk)

    assert '<span class="pbar-source">Injected instructions</span>' in html
    assert '<span class="pbar-source">integrity</span>' not in html


# ---- 8 and 9. the runs list: seconds, and exact-match filters said ----------------------------


def test_the_runs_list_shows_created_times_to_the_second(client, auditor, settings):
    settings.TIME_ZONE = "UTC"
    run = make_run()
    type(run).objects.filter(pk=run.pk).update(
        created_at=datetime(2026, 2, 11, 9, 30, 42, tzinfo=UTC)
    )
    client.force_login(auditor)

    html = get(client, "runs:list")

    row = html[html.index(f'<tr id="run-row-{run.pk}"') :]
    assert ">2026-02-11 09:30:42</time>" in row[: row.index("</tr>")]


def test_the_model_and_tool_filters_say_they_match_exactly(client, auditor):
    client.force_login(auditor)

    html = get(client, "runs:list")

    for name in ("model", "tool"):
        field = re.search(rf'<input name="{name}"[^>]*>', html).group(0)
        assert 'aria-describedby="filter-exact-hint"' in field
        assert 'placeholder="exact' in field
    hint = re.search(r'<p class="hint run-filter-hint" id="filter-exact-hint">(.*?)</p>', html)
    assert "match exactly" in hint.group(1)
    assert "registered tools you can filter by" in hint.group(1)
