"""The decision pane, /escalations/<id>/, through the Django client: opening an item claims it,
everything needed to decide is on it, each action reaches its service, and every refusal (a
missing reason, bad arguments, a stale tab, someone else's claim) is answered in place."""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from demo.setup import demo_policy_version
from escalations.claims import escalation_claim
from escalations.models import (
    Approval,
    EscalationEvent,
    EscalationStatus,
    ReviewGuidance,
    Verdict,
)
from escalations.verdicts import escalation_resolve
from guardian_core.models import PolicyVersion
from runs.models import RunStatus, ToolCallStatus
from tests.factories import make_decision, make_escalation, make_run, make_tool_call, make_turn
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


def detail(escalation) -> str:
    return reverse("escalations:detail", args=[escalation.pk])


def decide(escalation) -> str:
    return reverse("escalations:decide", args=[escalation.pk])


def held_refund(settings=None):
    """The demo's refund run, parked on its held issue_refund."""
    run = drive(start("refund_waits_for_approval"))
    return run.escalations.get(status=EscalationStatus.OPEN)


def opened(client, user, escalation):
    """`user` signed in with the escalation open (and so claimed) in their tab."""
    client.force_login(user)
    response = client.get(detail(escalation))
    assert response.status_code == 200
    return response


def the_hash(response) -> str:
    return response.context["pane"].held_calls[0].call.action_hash


def approve_form(response, **overrides) -> dict:
    """The POST the pane's form sends as shown: the call ticked, its hash, its risk class."""
    data = {
        "decision": "approve",
        "approve_call": "0",
        "seen_0": the_hash(response),
        "risk_0": "irreversible",
        "arguments_0": response.context["pane"].held_calls[0].arguments_json,
        "reason": "",
    }
    data.update(overrides)
    return data


# ---- opening an item ------------------------------------------------------------------------


def test_opening_an_item_claims_it_and_shows_everything_needed_to_decide(client, reviewer):
    escalation = held_refund()
    ReviewGuidance.objects.create(tool="issue_refund", text="Check the order was delivered.")
    ReviewGuidance.objects.create(condition="risk", text="Money leaving is irreversible.")
    response = opened(client, reviewer, escalation)
    escalation.refresh_from_db()
    assert escalation.claimed_by == reviewer
    page = response.content.decode()
    # Goal and criteria, the held call with its arguments, classes and the hash it binds to.
    assert "Refund order ord_4472: the parcel arrived broken." in page
    assert "The customer is told" in page
    assert "<code>issue_refund</code>" in page
    assert "Refund money to the customer&#x27;s card." in page
    assert "&quot;order_id&quot;: &quot;ord_4472&quot;" in page
    assert 'name="seen_0" value="' + the_hash(response) + '"' in page
    assert '<option value="irreversible" selected>' in page  # the guardian's class first
    # Why: the triggered gate; the last turns in short; the rubric; the history.
    assert "call 0 issue_refund: irreversible (declared irreversible)" in page
    assert "Turn 0" in page
    assert "<code>read_order</code> done" in page
    assert "Check the order was delivered." in page
    assert "Money leaving is irreversible." in page
    assert 'class="event event-claimed">Claimed</span> by <bdi>reviewer</bdi>' in page
    assert 'id="decision-form"' in page
    assert "Untrusted content" in page


def test_the_deadline_shows_a_countdown_with_its_time_zone(client, reviewer):
    escalation = held_refund()
    page = opened(client, reviewer, escalation).content.decode()
    assert f'<time datetime="{escalation.deadline.isoformat()}" data-countdown>in 23 h' in page
    assert " UTC)" in page


def test_an_item_held_by_someone_else_shows_who_and_since_when_and_no_action(
    client, reviewer, other_reviewer
):
    escalation = held_refund()
    escalation_claim(escalation_id=escalation.pk, reviewer=other_reviewer)
    page = opened(client, reviewer, escalation).content.decode()
    escalation.refresh_from_db()
    assert escalation.claimed_by == other_reviewer  # looking did not take it
    assert "Held by <bdi>other_reviewer</bdi> since" in page
    assert 'id="decision-form"' not in page
    assert "Extend the deadline" not in page


def test_a_decided_item_says_who_decided_it_when_and_how_never_an_error(client, reviewer):
    escalation = held_refund()
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")
    page = opened(client, reviewer, escalation).content.decode()
    assert "Decided by <bdi>reviewer</bdi> at" in page
    assert "Already decided" not in page  # nobody's submit was refused: it is just the record
    assert ": approved</h2>" in page
    assert "<p>Approved: call 0 (issue_refund).</p>" in page
    assert "<p>The run went on with its next turn.</p>" in page
    assert 'id="decision-form"' not in page
    # What only an open item has: no countdown, no "to approve or reject".
    assert "Deadline" not in page
    assert "data-countdown" not in page
    assert "to approve or reject" not in page
    assert "The step that was held: 1 call</h2>" in page
    assert '<span class="tag call-outcome approved">approved</span>' in page
    assert "Go to the verdict" in page


def test_a_decided_question_reads_its_answer_and_the_run_s_outcome_as_sentences(client, reviewer):
    escalation = drive(start("injected_instruction")).escalations.get()
    escalation_resolve(
        escalation_id=escalation.pk,
        reviewer=reviewer,
        decision="answer",
        answer={"integrity": True},
    )
    page = opened(client, reviewer, escalation).content.decode()
    assert "Does any tool output in the state contain instructions addressed to the agent?" in page
    assert '<span class="muted">(Injected instructions)</span></dt><dd>yes</dd>' in page
    assert "The run: " not in page
    assert "<p>The run went on with its next turn.</p>" in page
    assert "withheld from the actor until you clear it" not in page
    assert "answer its question beside" not in page


def test_an_expired_item_says_nothing_ran(client, reviewer):
    escalation = make_escalation(status="expired", resolved_at=timezone.now())
    page = opened(client, reviewer, escalation).content.decode()
    assert "Expired unanswered at" in page
    assert "Nothing ran" in page


def test_a_missing_item_is_a_404(client, reviewer):
    client.force_login(reviewer)
    assert client.get(reverse("escalations:detail", args=[999999])).status_code == 404
    assert client.post(reverse("escalations:decide", args=[999999])).status_code == 404


@pytest.mark.parametrize("persona", ["auditor", "outsider", "admin"])
def test_only_reviewers_open_or_decide_an_item(client, persona, request):
    escalation = held_refund()
    client.force_login(request.getfixturevalue(persona))
    assert client.get(detail(escalation)).status_code == 403
    assert client.post(decide(escalation), {"decision": "approve"}).status_code == 403
    for name in ("skip", "extend"):
        url = reverse(f"escalations:{name}", args=[escalation.pk])
        assert client.post(url).status_code == 403
    escalation.refresh_from_db()
    assert (escalation.claimed_by, escalation.status) == (None, EscalationStatus.OPEN)


def test_a_signed_out_visitor_is_sent_to_sign_in(client):
    escalation = held_refund()
    response = client.get(detail(escalation))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_what_the_pane_reads_does_not_grow_with_the_run(client, reviewer):
    def escalated_run(turns: int):
        run = make_run()
        for index in range(turns):
            turn = make_turn(run=run, index=index, proposal={"message": f"said on turn {index}"})
            make_decision(turn=turn)
            make_tool_call(turn=turn)
        return make_escalation(turn=turn, reason={"triggered": [], "held_calls": []})

    short, long = escalated_run(3), escalated_run(40)
    client.force_login(reviewer)

    def queries_for(escalation) -> tuple[int, str]:
        # Each open claims the item and releases the other: the same work both times.
        with CaptureQueriesContext(connection) as captured:
            page = client.get(detail(escalation)).content.decode()
        return len(captured), page

    queries_for(short)
    queries_for(long)
    short_count, _ = queries_for(short)
    long_count, page = queries_for(long)
    assert long_count == short_count
    assert "said on turn 39" in page
    assert "said on turn 35" in page
    assert "said on turn 34" not in page  # the last five turns only


# ---- approving, rejecting, editing ------------------------------------------------------------


def test_approving_through_the_pane_records_the_verdict_and_moves_the_run_on(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    answer = client.post(decide(escalation), approve_form(response, risk_0="regulated"), **HTMX)
    assert answer.status_code == 200
    verdict = Verdict.objects.get(escalation=escalation)
    assert (verdict.decision, verdict.approved_calls, verdict.reviewer) == (
        "approve",
        [0],
        reviewer,
    )
    assert verdict.risk_labels == {"0": "regulated"}  # the person's class, not the system's
    assert Approval.objects.get(escalation=escalation).action_hash == the_hash(response)
    escalation.run.refresh_from_db()
    assert escalation.run.status == RunStatus.RUNNING
    fragment = answer.content.decode()
    assert fragment.lstrip().startswith('<aside class="pane-side" id="decision-area"')
    assert '<h2 id="done-title">Approved</h2>' in fragment
    assert "Approved: call 0 (issue_refund). The run continues with its next turn." in fragment
    assert 'data-shortcut="next" autofocus' in fragment
    assert "<html" not in fragment


def test_without_javascript_a_decision_redirects_to_the_item_which_shows_it(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    answer = client.post(decide(escalation), approve_form(response))
    assert answer.status_code == 302
    assert answer["Location"] == detail(escalation)
    page = client.get(answer["Location"]).content.decode()
    assert "Approved. The run continues with its next turn." in page
    assert "Decided by <bdi>reviewer</bdi>" in page


def test_a_rejection_without_a_reason_is_refused_in_place_with_what_was_typed(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    typed = '{\n  "amount": 10,\n  "order_id": "ord_4472"\n}'
    form = approve_form(response, decision="reject", reason="  ", risk_0="regulated")
    form["arguments_0"] = typed
    answer = client.post(decide(escalation), form, **HTMX)
    assert answer.status_code == 200
    fragment = answer.content.decode()
    assert "reason: a rejection needs a reason the actor can act on" in fragment
    assert 'role="alert"' in fragment
    assert 'id="reason" name="reason"' in fragment
    assert 'aria-invalid="true"' in fragment
    assert '<option value="regulated" selected>' in fragment
    assert "&quot;amount&quot;: 10," in fragment  # the edited text is still there
    assert not Verdict.objects.exists()


def test_a_rejection_with_a_reason_reaches_the_actor(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    form = approve_form(response, decision="reject", reason="Insured parcel: no refund")
    answer = client.post(decide(escalation), form, **HTMX)
    verdict = Verdict.objects.get(escalation=escalation)
    assert (verdict.decision, verdict.reason) == ("reject", "Insured parcel: no refund")
    assert verdict.risk_labels == {"0": "irreversible"}
    assert '<h2 id="done-title">Rejected</h2>' in answer.content.decode()


def test_invalid_json_in_the_arguments_editor_is_named_and_nothing_is_approved(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    form = approve_form(response, arguments_0='{"amount": 10,, "order_id": "ord_4472"}')
    fragment = client.post(decide(escalation), form, **HTMX).content.decode()
    assert "arguments of call 0 (issue_refund): not valid JSON" in fragment
    assert "line 1, column 15" in fragment
    assert '<details class="edit-arguments" open>' in fragment
    assert not Verdict.objects.exists()
    assert not Approval.objects.exists()


def test_edited_arguments_that_break_the_schema_name_every_problem_at_once(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    bad = json.dumps({"amount": -5, "order_id": 4472, "note": "x"})
    fragment = client.post(
        decide(escalation), approve_form(response, arguments_0=bad), **HTMX
    ).content.decode()
    problems = [line for line in fragment.splitlines() if "arguments of call 0" in line]
    named = {field for field in ("amount", "order_id", "note") if field in " ".join(problems)}
    assert named == {"amount", "order_id", "note"}, fragment
    assert not Verdict.objects.exists()
    assert 'aria-invalid="true"' in fragment


def test_edited_arguments_are_approved_with_the_original_kept(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    edited = json.dumps({"amount": 25.0, "order_id": "ord_4472"})
    client.post(decide(escalation), approve_form(response, arguments_0=edited), **HTMX)
    approval = Approval.objects.get(escalation=escalation)
    assert approval.arguments == {"amount": 25.0, "order_id": "ord_4472"}
    assert approval.original_arguments == {"amount": 49.9, "order_id": "ord_4472"}
    assert approval.modified


def test_the_arguments_as_shown_unchanged_are_not_an_edit(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    client.post(decide(escalation), approve_form(response), **HTMX)
    assert Approval.objects.get(escalation=escalation).original_arguments is None


def test_a_call_that_changed_since_the_page_was_opened_is_not_approved(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    fragment = client.post(
        decide(escalation), approve_form(response, seen_0="0" * 64), **HTMX
    ).content.decode()
    assert "call 0 (issue_refund) changed since you opened it" in fragment
    assert not Verdict.objects.exists()


def test_approving_with_no_call_ticked_is_refused(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    form = approve_form(response)
    del form["approve_call"]
    fragment = client.post(decide(escalation), form, **HTMX).content.decode()
    assert "approve_call: tick the calls to approve, or reject the step" in fragment
    assert not Approval.objects.exists()
    assert Verdict.objects.filter(decision="approve").count() == 0


# ---- stale tabs and other holders -------------------------------------------------------------


def test_a_second_submit_says_already_decided_and_keeps_one_verdict(client, reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    form = approve_form(response)
    client.post(decide(escalation), form, **HTMX)
    again = client.post(decide(escalation), form, **HTMX)
    assert again.status_code == 200
    fragment = again.content.decode()
    assert "Already decided by <bdi>reviewer</bdi> at" in fragment
    assert "Your decision was not recorded" in fragment
    assert 'role="alert"' in fragment
    assert Verdict.objects.filter(escalation=escalation).count() == 1


def test_a_stale_tab_decided_elsewhere_gets_the_message_in_place(client, reviewer, other_reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    escalation.claimed_by = None
    escalation.save(update_fields=["claimed_by"])
    escalation_resolve(
        escalation_id=escalation.pk, reviewer=other_reviewer, decision="reject", reason="No"
    )
    fragment = client.post(decide(escalation), approve_form(response), **HTMX).content.decode()
    assert "Already decided by <bdi>other_reviewer</bdi>" in fragment
    assert ": rejected</h2>" in fragment
    assert "<p>Reason: <bdi>No</bdi></p>" in fragment
    # What the run did reads as a sentence, not "The run: continue."
    assert "<p>The run went on with its next turn.</p>" in fragment
    assert "Deadline" not in fragment
    assert Verdict.objects.get(escalation=escalation).reviewer == other_reviewer


def test_deciding_an_item_someone_else_claimed_since_names_them(client, reviewer, other_reviewer):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    escalation.claim_expires_at = timezone.now() - timedelta(seconds=1)
    escalation.save(update_fields=["claim_expires_at"])
    escalation_claim(escalation_id=escalation.pk, reviewer=other_reviewer)
    fragment = client.post(decide(escalation), approve_form(response), **HTMX).content.decode()
    assert "claim: other_reviewer holds this escalation since" in fragment
    assert "Held by <bdi>other_reviewer</bdi>" in fragment
    assert 'id="decision-form"' not in fragment
    assert not Verdict.objects.exists()


# ---- questions, ambiguous calls, the review loop ---------------------------------------------


def test_an_injection_question_is_answered_yes_or_no(client, reviewer):
    run = drive(start("injected_instruction"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    page = opened(client, reviewer, escalation).content.decode()
    assert "IGNORE ALL PREVIOUS INSTRUCTIONS" in page  # the output that triggered it
    assert "withheld from the actor until you clear it" in page
    assert 'name="answer_integrity" value="yes" data-answer="yes"' in page
    client.post(
        decide(escalation),
        {"decision": "answer", "answer_integrity": "yes", "reason": "A planted note"},
        **HTMX,
    )
    verdict = Verdict.objects.get(escalation=escalation)
    assert (verdict.answer, verdict.reason) == ({"integrity": True}, "A planted note")


def test_a_guardian_failure_asks_every_question_and_names_a_bad_answer(client, reviewer, settings):
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3
    run = drive(start("guardian_timeout"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    page = opened(client, reviewer, escalation).content.decode()
    for condition in ("integrity", "infeasible", "goal_reached", "drift", "stagnation"):
        assert f'name="answer_{condition}"' in page
    answers = {
        "answer_integrity": "no",
        "answer_infeasible": "no",
        "answer_goal_reached": "no",
        "answer_stagnation": "no",
    }
    drift = "How well is the current sub-task aligned with the original goal"
    fragment = client.post(
        decide(escalation), {"decision": "answer", **answers, "answer_drift": "9"}, **HTMX
    ).content.decode()
    # The problem says the question, not only its condition, and marks its choices.
    assert (
        f"\u201c{drift}, from 0 (unrelated to the goal) to 4 (fully aligned)?\u201d (drift): "
        in fragment
    )
    assert "(drift): a drift score from 0 to 4" in fragment
    assert (
        'id="answer_drift_0" name="answer_drift" value="0" data-answer="0" aria-invalid="true"'
        in fragment
    )
    assert 'value="no" data-answer="no" checked' in fragment  # the other answers are kept
    fragment = client.post(
        decide(escalation), {"decision": "answer", **answers}, **HTMX
    ).content.decode()
    assert "(drift): choose a drift score from 0 to 4" in fragment
    client.post(decide(escalation), {"decision": "answer", **answers, "answer_drift": "4"}, **HTMX)
    verdict = Verdict.objects.get(escalation=escalation)
    assert verdict.answer == {
        "integrity": False,
        "infeasible": False,
        "goal_reached": False,
        "drift": 4,
        "stagnation": False,
    }


def test_an_ambiguous_call_that_did_not_go_through_can_be_run_again(client, reviewer):
    from tests.test_runs import _approved_refund_run_that_crashed

    run = drive(_approved_refund_run_that_crashed(reviewer, ToolCallStatus.STARTED))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    page = opened(client, reviewer, escalation).content.decode()
    assert "It went through" in page
    assert "It did not" in page
    client.post(
        decide(escalation),
        {"decision": "reject", "reason": "Not in the payment console", "rerun": "1"},
        **HTMX,
    )
    verdict = Verdict.objects.get(escalation=escalation)
    assert (verdict.decision, verdict.rerun) == ("reject", True)


def test_the_round_cap_of_a_review_loop_accepts_the_last_code(client, reviewer):
    run = drive(start("coder_reviewer_round_cap"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    page = opened(client, reviewer, escalation).content.decode()
    assert "def slugify(text):" in page
    assert "Accept the last code" in page
    client.post(decide(escalation), {"decision": "approve", "reason": ""}, **HTMX)
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == (RunStatus.SUCCEEDED, "approved_by_reviewer")


# ---- quorum, skip, extend ---------------------------------------------------------------------


def test_a_first_approval_under_a_quorum_says_it_waits_for_a_second_approver(
    client, reviewer, other_reviewer
):
    version = demo_policy_version()
    PolicyVersion.objects.filter(pk=version.pk).update(quorum={"tools": ["issue_refund"]})
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    assert "Needs two approvers." in response.content.decode()
    fragment = client.post(decide(escalation), approve_form(response), **HTMX).content.decode()
    assert "Recorded — waiting for a second approver" in fragment
    assert not Verdict.objects.exists()
    page = client.get(detail(escalation)).content.decode()
    assert "You approved this step." in page
    assert 'id="decision-form"' not in page
    client.force_login(other_reviewer)
    second = client.get(detail(escalation))
    assert "Approved so far by <bdi>reviewer</bdi>" in second.content.decode()
    last = client.post(decide(escalation), approve_form(second), **HTMX)
    assert Verdict.objects.filter(escalation=escalation).exists(), last.content.decode()
    assert Verdict.objects.get(escalation=escalation).reviewer == other_reviewer


def test_skipping_releases_the_item_with_its_reason_and_goes_back_to_the_queue(client, reviewer):
    escalation = held_refund()
    opened(client, reviewer, escalation)
    url = reverse("escalations:skip", args=[escalation.pk])
    response = client.post(url, {"reason": "Need the courier's report"}, **HTMX)
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("escalations:queue")
    escalation.refresh_from_db()
    assert escalation.claimed_by is None
    event = EscalationEvent.objects.filter(escalation=escalation, kind="skipped").get()
    assert (event.actor, event.note) == (reviewer, "Need the courier's report")
    assert escalation.status == EscalationStatus.OPEN


def test_skipping_without_javascript_redirects_to_the_queue(client, reviewer):
    escalation = held_refund()
    opened(client, reviewer, escalation)
    response = client.post(reverse("escalations:skip", args=[escalation.pk]))
    assert (response.status_code, response["Location"]) == (302, reverse("escalations:queue"))


def test_the_holder_extends_the_deadline_once(client, reviewer):
    escalation = held_refund()
    before = escalation.deadline
    opened(client, reviewer, escalation)
    url = reverse("escalations:extend", args=[escalation.pk])
    fragment = client.post(url, **HTMX).content.decode()
    escalation.refresh_from_db()
    assert escalation.deadline == before + timedelta(minutes=60)
    assert "Deadline extended." in fragment
    assert "extended once" in fragment
    assert "Extend the deadline once" not in fragment
    again = client.post(url, **HTMX).content.decode()
    assert "deadline: already extended once" in again
    escalation.refresh_from_db()
    assert escalation.deadline == before + timedelta(minutes=60)


def test_someone_who_does_not_hold_the_item_cannot_extend_it(client, reviewer, other_reviewer):
    escalation = held_refund()
    escalation_claim(escalation_id=escalation.pk, reviewer=other_reviewer)
    client.force_login(reviewer)
    url = reverse("escalations:extend", args=[escalation.pk])
    fragment = client.post(url, **HTMX).content.decode()
    assert "claim: other_reviewer holds it since" in fragment
    escalation.refresh_from_db()
    assert not escalation.deadline_extended


# ---- untrusted content ------------------------------------------------------------------------

PAYLOAD = '<script>alert(1)</script><img src=x onerror="alert(2)">'


def test_untrusted_text_is_escaped_everywhere_on_the_pane(client, reviewer):
    run = make_run(goal=PAYLOAD, acceptance_criteria=[PAYLOAD])
    turn = make_turn(run=run, proposal={"message": PAYLOAD, "calls": []})
    make_decision(turn=turn, reasons=[{"band": "fired", "detail": PAYLOAD, "source": "integrity"}])
    make_tool_call(turn=turn, result=PAYLOAD, status="done")
    escalation = make_escalation(
        turn=turn,
        kind="integrity",
        summary=PAYLOAD,
        reason={"triggered": [{"source": "integrity", "band": "fired", "detail": PAYLOAD}]},
    )
    page = opened(client, reviewer, escalation).content.decode()
    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 6


def test_a_bidirectional_override_is_flagged_and_escaped_in_the_arguments(client, reviewer):
    run = make_run(goal="Refund \u202eevil\u202c order")
    turn = make_turn(run=run, proposal={"message": "", "calls": []})
    make_decision(turn=turn, risk_answers=[{"irreversible": 1.0}])
    make_tool_call(
        turn=turn,
        tool="issue_refund",
        arguments={"order_id": "ord_\u202e2744", "amount": 1},
        risk_class="irreversible",
        status="held",
    )
    escalation = make_escalation(turn=turn, reason={"triggered": [], "held_calls": [0]})
    page = opened(client, reviewer, escalation).content.decode()
    assert "text-direction control characters" in page
    assert "&quot;ord_\\u202e2744&quot;" in page  # the JSON shows the control as its escape
    # Written out where it stands: the goal cannot read in another order than it is stored.
    assert '<p class="goal" dir="auto">Refund [U+202E]evil[U+202C] order</p>' in page
    assert "\u202e" not in page


def test_the_problems_are_listed_in_the_order_of_the_form_each_linked_to_its_field(
    client, reviewer
):
    escalation = held_refund()
    response = opened(client, reviewer, escalation)
    # The service finds the missing reason before the changed call; the list shows the call
    # first, where the reviewer meets it in the form, and the reason last.
    form = approve_form(response, decision="reject", reason="", seen_0="0" * 64)
    fragment = client.post(decide(escalation), form, **HTMX).content.decode()
    problems = fragment[fragment.index('id="decision-problems"') : fragment.index("</ul>")]
    changed = problems.index("call 0 (issue_refund) changed since you opened it")
    assert changed < problems.index('<a href="#reason">reason: a rejection needs a reason'), (
        problems
    )
    # A field's problem links to the field, which is marked invalid.
    form = approve_form(response, risk_0="bogus")
    fragment = client.post(decide(escalation), form, **HTMX).content.decode()
    assert '<a href="#risk_0">risk_labels: call 0 (issue_refund): one of' in fragment
    assert 'id="risk_0" name="risk_0" aria-invalid="true"' in fragment
    assert not Verdict.objects.exists()
