"""Audit samples and how labelled examples were selected (issue 25, "priors are data"): a share
of the turns the policy let through goes to the reviewers' queue as a low-priority item that
holds nothing; its label is an example selected `audit_sample`; every labelled example says
how it was selected, through the export and the import."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from escalations.audit_samples import audit_draw, audit_sample_open
from escalations.errors import EscalationError
from escalations.examples import (
    ExampleFilters,
    audit_sample_counts,
    examples_import,
    labelled_examples_jsonl,
)
from escalations.models import (
    Escalation,
    EscalationKind,
    EscalationStatus,
    ExampleSelection,
    ExampleSource,
    LabelledExample,
)
from escalations.verdicts import escalation_resolve
from guardian_core.engine.conditions import Condition, compared_probability, parse_answer
from guardian_core.env import env_float
from runs.audit import run_chain_verify, run_export, run_import, run_purge
from runs.log_triggers import log_purge
from runs.models import Decision, Run, RunStatus
from runs.services import run_advance, run_cancel, run_start
from runs.sweeps import run_sweep_stalled
from tests.runs_helpers import drive, start

CALM = {
    "integrity": 0.01,
    "infeasible": 0.02,
    "goal_reached": 0.05,
    "drift": {"0": 0, "1": 0, "2": 0.1, "3": 0.3, "4": 0.6},
    "stagnation": 0.05,
}


def reading_run(turns: int = 3) -> Run:
    """A scripted run on the demo policy: it reads an order a turn, then says it is done; the
    guardian is calm, so no turn escalates and the last one stops with success."""
    from demo.setup import demo_policy_version

    demo_policy_version()
    steps = [
        {"calls": [{"tool": "read_order", "arguments": {"order_id": f"ord_{i:04d}"}}]}
        for i in range(turns)
    ]
    scenario = {
        "name": "audited",
        "goal": "Read the orders and report their totals.",
        "tools": ["read_order"],
        "actor": {"turns": [*steps, {"calls": [], "message": "All totals reported."}]},
        "guardian": {
            "model_version": "scripted-calm",
            "turns": [CALM] * turns + [{**CALM, "goal_reached": 0.97}],
            "default": CALM,
        },
    }
    return run_start(
        goal=scenario["goal"],
        acceptance_criteria=[],
        tools=["read_order"],
        actor="scripted",
        guardian="scripted",
        budgets={"max_turns": turns + 3},
        config={"scenario": scenario},
    )


def audit_items(run: Run):
    return Escalation.objects.filter(run=run, kind=EscalationKind.AUDIT_SAMPLE).order_by("id")


# ---- the draw ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_with_share_one_a_turn_that_went_on_opens_one_audit_item_and_the_run_goes_on(settings):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    assert run_advance(run_id=run.pk) == "continued"
    run.refresh_from_db()

    assert run.status == RunStatus.RUNNING  # not parked
    (item,) = audit_items(run)
    assert item.status == EscalationStatus.OPEN
    assert item.turn.index == 0
    assert item.urgency == 2
    assert not run.escalations.raised().exists()
    # The item asks about one condition the guardian answered, with its probability.
    (asked,) = item.reason["triggered"]
    decision = item.turn.decision
    assert asked["source"] in decision.answers
    assert item.conditions == f",{asked['source']},"
    assert item.reason["audit"]["decision_id"] == decision.pk
    assert item.reason["audit"]["share"] == 1.0

    # The run goes on to its next turn, which is drawn too: one item per turn.
    assert run_advance(run_id=run.pk) == "continued"
    assert run.turns.count() == 2
    assert [i.turn.index for i in audit_items(run)] == [0, 1]
    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    # Every decided turn went on or stopped without a person: each was drawn once.
    assert audit_items(run).count() == run.turns.count() == 4
    assert run_chain_verify(run).ok


@pytest.mark.django_db(transaction=True)
def test_a_turn_written_in_one_statement_is_drawn_right_after_it(settings):
    # Outside a transaction, PostgreSQL writes the continuing turn in one statement
    # (runs/recording.py); the draw follows it.
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    assert run_advance(run_id=run.pk) == "continued"
    (item,) = audit_items(run)
    assert item.reason["audit"]["decision_id"] == Decision.objects.get(turn__run=run).pk
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


@pytest.mark.django_db
def test_with_share_zero_no_turn_is_drawn(settings):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 0.0
    run = drive(reading_run())
    assert run.status == RunStatus.SUCCEEDED
    assert not Escalation.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_the_draw_is_reproducible_from_the_decision_and_a_turn_is_drawn_once(settings):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 0.5
    run = drive(reading_run(turns=8))
    decisions = Decision.objects.filter(turn__run=run).select_related("turn")
    drawn = {item.turn_id for item in audit_items(run)}
    # Anyone with the log recomputes which turns were drawn, and why.
    expected = {d.turn_id for d in decisions if audit_draw(d.pk, d.content_hash)[0] < 0.5}
    assert drawn == expected
    assert audit_draw(7, "abc") == audit_draw(7, "abc")
    assert audit_draw(7, "abc") != audit_draw(8, "abc")
    for item in audit_items(run):
        decision = item.turn.decision
        value, pick = audit_draw(decision.pk, decision.content_hash)
        assert item.reason["audit"]["draw"] == value
        answered = item.reason["audit"]["answered"]
        assert item.reason["triggered"][0]["source"] == answered[pick % len(answered)]

    # A retried draw of a turn already drawn (or not) adds nothing.
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    before = audit_items(run).count()
    for decision in decisions:
        again = audit_sample_open(
            run=run,
            turn=decision.turn,
            decision_id=decision.pk,
            content_hash=decision.content_hash,
            outcome=decision.outcome,
            answers=decision.answers,
            reasons=decision.reasons,
            now=timezone.now(),
        )
        assert again is None or again.turn_id not in drawn
    assert audit_items(run).count() == decisions.count() >= before
    assert all(
        Escalation.objects.filter(turn=d.turn, kind=EscalationKind.AUDIT_SAMPLE).count() == 1
        for d in decisions
    )


@pytest.mark.django_db
def test_a_turn_that_escalated_is_never_drawn(settings):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = drive(start("refund_waits_for_approval"))
    assert run.status == RunStatus.WAITING
    held = run.escalations.raised().get(status=EscalationStatus.OPEN)
    assert not audit_items(run).filter(turn=held.turn).exists()
    # The turns before it went on: drawn, open beside the run's one open question.
    assert audit_items(run).filter(status=EscalationStatus.OPEN).exists()
    assert run.escalations.filter(status=EscalationStatus.OPEN).count() >= 2


# ---- the verdict -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_verdict_on_an_audit_item_makes_one_example_and_changes_nothing_in_the_run(
    settings, reviewer
):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = audit_items(run).get()
    condition = item.reason["triggered"][0]["source"]
    run.refresh_from_db()
    before = (run.status, run.seal, run.updated_at, run.turns.count(), run.state)

    label = 0 if condition == Condition.DRIFT else True
    verdict = escalation_resolve(
        escalation_id=item.pk, reviewer=reviewer, decision="answer", answer={condition: label}
    )

    run.refresh_from_db()
    assert (run.status, run.seal, run.updated_at, run.turns.count(), run.state) == before
    assert verdict.resulting_outcome == "unchanged"
    item.refresh_from_db()
    assert item.status == EscalationStatus.ANSWERED
    (example,) = LabelledExample.objects.all()
    assert example.selection == ExampleSelection.AUDIT_SAMPLE
    assert example.source == ExampleSource.HUMAN
    assert example.condition == condition
    assert example.label == label
    assert example.labelled_by == reviewer
    decision = item.turn.decision
    guardian = compared_probability(
        Condition(condition), parse_answer(Condition(condition), decision.answers[condition])
    )
    assert example.probability == pytest.approx(guardian)
    assert example.projection == item.turn.projection
    # The live prior's reader (policies/priors.py) counts the same label.
    from policies.priors import audit_counts

    # True, or drift score 0 (the sub-task has left the goal): the positive class either way.
    assert audit_sample_counts(condition) == audit_counts(condition) == (1, 1)
    # The run's log still holds, and the run goes on as if nobody had looked.
    assert run_chain_verify(run).ok
    assert drive(run).status == RunStatus.SUCCEEDED
    assert run_chain_verify(run).ok


@pytest.mark.django_db
def test_an_audit_item_is_answered_never_approved_or_rejected(settings, reviewer):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = audit_items(run).get()
    for decision in ("approve", "reject"):
        with pytest.raises(EscalationError, match="an audit sample is answered"):
            escalation_resolve(
                escalation_id=item.pk, reviewer=reviewer, decision=decision, reason="no"
            )
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert not LabelledExample.objects.exists()


@pytest.mark.django_db
def test_answering_an_audit_item_leaves_a_parked_run_parked_on_its_own_question(settings, reviewer):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = drive(start("refund_waits_for_approval"))
    held = run.escalations.raised().get(status=EscalationStatus.OPEN)
    item = audit_items(run).filter(status=EscalationStatus.OPEN).first()
    condition = item.reason["triggered"][0]["source"]
    escalation_resolve(
        escalation_id=item.pk,
        reviewer=reviewer,
        decision="answer",
        answer={condition: 3 if condition == Condition.DRIFT else False},
    )
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    held.refresh_from_db()
    assert held.status == EscalationStatus.OPEN
    # The held step's approval resumes the run from the held turn, not from the audit item.
    escalation_resolve(escalation_id=held.pk, reviewer=reviewer, decision="approve")
    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    assert run_chain_verify(run).ok


# ---- cancel and expiry -------------------------------------------------------------------------


@pytest.mark.django_db
def test_cancelling_a_run_with_an_open_audit_item_cancels_the_item(settings):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = audit_items(run).get()
    assert run_cancel(run_id=run.pk) is True
    run.refresh_from_db()
    item.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert item.status == EscalationStatus.CANCELLED
    assert item.resolved_at is not None
    assert run_chain_verify(run).ok


@pytest.mark.django_db
def test_an_expired_audit_item_closes_without_touching_its_run(settings):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = audit_items(run).get()
    Escalation.objects.filter(pk=item.pk).update(deadline=timezone.now() - timedelta(minutes=1))
    run.refresh_from_db()
    before = (run.status, run.seal, run.stop_reason, run.updated_at)
    run_sweep_stalled()
    item.refresh_from_db()
    run.refresh_from_db()
    assert item.status == EscalationStatus.EXPIRED
    assert (run.status, run.seal, run.stop_reason, run.updated_at) == before
    assert item.events.get().note.startswith("deadline passed unanswered; no label")
    assert drive(run).status == RunStatus.SUCCEEDED


# ---- the queue ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_queue_shows_audit_items_last_and_filters_them_by_kind(settings, client, reviewer):
    import re

    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = audit_items(run).get()
    # The audit item's deadline comes first; the item that holds a run still goes before it.
    Escalation.objects.filter(pk=item.pk).update(deadline=timezone.now() + timedelta(minutes=5))
    held = drive(start("refund_waits_for_approval"))
    question = held.escalations.raised().get(status=EscalationStatus.OPEN)
    others = list(audit_items(held).filter(status=EscalationStatus.OPEN))

    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    rows = [int(pk) for pk in re.findall(r'data-escalation-id="(\d+)"', page)]
    assert rows[0] == question.pk
    assert set(rows[1:]) == {item.pk, *(o.pk for o in others)}
    assert "Audit sample" in page

    page = client.get("/escalations/?kind=audit_sample").content.decode()
    rows = [int(pk) for pk in re.findall(r'data-escalation-id="(\d+)"', page)]
    assert question.pk not in rows
    assert item.pk in rows


@pytest.mark.django_db
def test_a_reviewer_answers_an_audit_item_on_its_page(settings, client, reviewer):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = audit_items(run).get()
    condition = item.reason["triggered"][0]["source"]
    client.force_login(reviewer)
    page = client.get(f"/escalations/{item.pk}/").content.decode()
    assert "An audit sample" in page
    assert "it does not change the run" in page
    assert 'value="reject"' not in page  # nothing to reject: it holds nothing
    assert 'name="end_as"' not in page
    answer = "0" if condition == Condition.DRIFT else "no"
    response = client.post(
        f"/escalations/{item.pk}/decide",
        {"decision": "answer", f"answer_{condition}": answer},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert "is not changed: an audit answer labels the turn" in response.content.decode()
    assert LabelledExample.objects.get().selection == ExampleSelection.AUDIT_SAMPLE
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING


# ---- what the audit labels count -------------------------------------------------------------


@pytest.mark.django_db
def test_audit_sample_counts_people_labels_of_audit_samples_only():
    common = {"projection": {"goal": "g"}, "question_set_version": "q", "model_version": "m"}
    audit = {**common, "selection": ExampleSelection.AUDIT_SAMPLE, "condition": "integrity"}
    LabelledExample.objects.create(**audit, label=True, source=ExampleSource.HUMAN)
    LabelledExample.objects.create(**audit, label=False, source=ExampleSource.HUMAN)
    LabelledExample.objects.create(**audit, label=False, source=ExampleSource.IMPORT)
    # Not counted: the judge's label, an escalated example, another condition.
    LabelledExample.objects.create(**audit, label=True, source=ExampleSource.JUDGE)
    LabelledExample.objects.create(
        **{**audit, "selection": ExampleSelection.ESCALATED}, label=True, source="human"
    )
    LabelledExample.objects.create(
        **{**audit, "condition": "drift"}, label=0, source=ExampleSource.HUMAN
    )
    assert audit_sample_counts("integrity") == (1, 3)
    assert audit_sample_counts(Condition.DRIFT) == (1, 1)
    assert audit_sample_counts("goal_reached") == (0, 0)


# ---- how each example was selected -------------------------------------------------------------


@pytest.mark.django_db
def test_a_verdict_on_an_escalation_makes_escalated_examples(reviewer):
    run = drive(start("injected_instruction"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    escalation_resolve(
        escalation_id=escalation.pk,
        reviewer=reviewer,
        decision="answer",
        answer={"integrity": True},
    )
    assert set(LabelledExample.objects.values_list("selection", flat=True)) == {"escalated"}


@pytest.mark.django_db
def test_an_import_keeps_each_lines_selection_and_defaults_to_imported():
    line = {"condition": "integrity", "projection": {"goal": "g"}, "label": True}
    lines = [
        json.dumps({**line, "projection": {"goal": "a"}}),
        json.dumps({**line, "projection": {"goal": "b"}, "selection": "near_miss"}),
        json.dumps({**line, "projection": {"goal": "c"}, "selection": "audit_sample"}),
        # DESIGN.md's spelling of an import.
        json.dumps({**line, "projection": {"goal": "d"}, "selection": "import"}),
    ]
    examples_import(lines=lines)
    got = dict(LabelledExample.objects.values_list("projection__goal", "selection"))
    assert got == {"a": "imported", "b": "near_miss", "c": "audit_sample", "d": "imported"}
    assert set(LabelledExample.objects.values_list("source", flat=True)) == {"import"}


@pytest.mark.django_db
def test_an_import_refuses_a_selection_it_does_not_know_and_stores_nothing():
    from escalations.examples import ExamplesImportError

    good = {"condition": "integrity", "projection": {"goal": "g"}, "label": True}
    with pytest.raises(ExamplesImportError) as refused:
        examples_import(lines=[json.dumps(good), json.dumps({**good, "selection": "random"})])
    assert [p.line for p in refused.value.problems] == [2]
    assert "selection: 'random' is not one of escalated, audit_sample" in str(refused.value)
    assert not LabelledExample.objects.exists()


@pytest.mark.django_db
def test_the_export_writes_selection_and_reads_back_the_same(settings, reviewer):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = audit_items(run).get()
    condition = item.reason["triggered"][0]["source"]
    escalation_resolve(
        escalation_id=item.pk,
        reviewer=reviewer,
        decision="answer",
        answer={condition: 1 if condition == Condition.DRIFT else False},
    )
    examples_import(
        lines=[
            json.dumps(
                {"condition": "stagnation", "projection": {"goal": "x"}, "label": False}
                | {"selection": "near_miss"}
            )
        ]
    )
    lines = list(labelled_examples_jsonl(ExampleFilters()))
    exported = [json.loads(line) for line in lines]
    assert sorted(e["selection"] for e in exported) == ["audit_sample", "near_miss"]

    with log_purge(reason="test: read the export back into an empty table", actor="test"):
        LabelledExample.objects.all().delete()
    examples_import(lines=lines)
    back = sorted(LabelledExample.objects.values_list("condition", "selection"))
    assert back == sorted((e["condition"], e["selection"]) for e in exported)


@pytest.mark.django_db
def test_a_run_export_carries_its_examples_selection_and_an_older_one_is_read_as_escalated(
    settings, reviewer
):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = drive(start("refund_waits_for_approval"))
    held = run.escalations.raised().get(status=EscalationStatus.OPEN)
    item = audit_items(run).filter(status=EscalationStatus.OPEN).first()
    condition = item.reason["triggered"][0]["source"]
    escalation_resolve(
        escalation_id=item.pk,
        reviewer=reviewer,
        decision="answer",
        answer={condition: 2 if condition == Condition.DRIFT else False},
    )
    escalation_resolve(escalation_id=held.pk, reviewer=reviewer, decision="approve")
    run.refresh_from_db()
    document = run_export(run)
    selections = {
        e["kind"]: {x["selection"] for x in e["verdict"]["examples"]}
        for e in document["escalations"]
        if e["verdict"]
    }
    assert selections == {"audit_sample": {"audit_sample"}, "gated_step": {"escalated"}}

    run_purge(run_id=run.pk)
    # A document written before selections were kept says none: its verdicts' kinds tell.
    for escalation in document["escalations"]:
        for example in (escalation["verdict"] or {}).get("examples", []):
            del example["selection"]
    again = run_import(document)
    got = {
        (e.verdict.escalation.kind, e.selection)
        for e in LabelledExample.objects.filter(verdict__escalation__run=again)
    }
    assert got == {("audit_sample", "audit_sample"), ("gated_step", "escalated")}
    assert run_chain_verify(again).ok


# ---- the setting -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1.5", "-0.1", "lots", "nan"])
def test_a_share_outside_zero_to_one_is_refused_at_start(monkeypatch, value):
    monkeypatch.setenv("GUARDIAN_AUDIT_SAMPLE_SHARE", value)
    with pytest.raises(ImproperlyConfigured, match="GUARDIAN_AUDIT_SAMPLE_SHARE="):
        env_float("GUARDIAN_AUDIT_SAMPLE_SHARE", 0.02, minimum=0.0, maximum=1.0)


def test_a_share_from_zero_to_one_is_read(monkeypatch):
    monkeypatch.setenv("GUARDIAN_AUDIT_SAMPLE_SHARE", "0.25")
    assert env_float("GUARDIAN_AUDIT_SAMPLE_SHARE", 0.02, minimum=0.0, maximum=1.0) == 0.25


# ---- the backfill ------------------------------------------------------------------------------

BEFORE_SELECTION = [("escalations", "0006_guidance_constraint_messages")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_selects_imports_as_imported_and_verdicts_and_judge_labels_as_escalated():
    from tests.factories import make_escalation

    escalation = make_escalation(kind=EscalationKind.UNCERTAIN)
    person = get_user_model().objects.create_user("old-reviewer", password="x")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(BEFORE_SELECTION)
    old = MigrationExecutor(connection).loader.project_state(BEFORE_SELECTION).apps
    Example = old.get_model("escalations", "LabelledExample")
    assert "selection" not in {f.name for f in Example._meta.get_fields()}
    verdict = old.get_model("escalations", "Verdict").objects.create(
        escalation_id=escalation.pk, decision="answer", answer={"drift": 1}, reviewer_id=person.pk
    )
    common = {"projection": {"goal": "g"}, "question_set_version": "q", "model_version": "m"}
    ids = {
        "human": Example.objects.create(
            **common, condition="drift", label=1, source="human", verdict_id=verdict.pk
        ).pk,
        "judge": Example.objects.create(
            **common, condition="integrity", label=False, source="judge"
        ).pk,
        "import": Example.objects.create(
            **common, condition="integrity", label=True, source="import"
        ).pk,
    }

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    selected = dict(LabelledExample.objects.values_list("id", "selection"))
    assert selected == {
        ids["human"]: "escalated",
        ids["judge"]: "escalated",
        ids["import"]: "imported",
    }
    # The log's triggers are back: an example still cannot change.
    from django.db import DatabaseError

    with pytest.raises(DatabaseError, match="append-only"):
        LabelledExample.objects.filter(pk=ids["import"]).update(selection="near_miss")


@pytest.mark.django_db
def test_an_audit_items_page_says_it_was_sampled_offers_no_extension_and_logs_the_answer(
    settings, client, reviewer
):
    from django.utils.html import escape

    from escalations.claims import escalation_extend_deadline
    from runs.vocabulary import source_words

    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = audit_items(run).get()
    condition = item.reason["triggered"][0]["source"]
    client.force_login(reviewer)
    page = client.get(f"/escalations/{item.pk}/").content.decode()
    assert "The sampled turn" in page
    assert "The escalated turn" not in page  # nothing was escalated
    assert "Extend the deadline once" not in page  # it holds nothing
    with pytest.raises(EscalationError, match="audit sample holds nothing"):
        escalation_extend_deadline(escalation_id=item.pk, reviewer=reviewer)
    assert escape("the guardian's probability") in page
    assert "by the guardian;" not in item.summary
    answer = "0" if condition == Condition.DRIFT else "no"
    client.post(
        f"/escalations/{item.pk}/decide",
        {"decision": "answer", f"answer_{condition}": answer},
        HTTP_HX_REQUEST="true",
    )
    page = client.get(f"/escalations/{item.pk}/").content.decode()
    history = page.split('id="history-title"', 1)[1]
    assert f"answer ({escape(source_words(condition))}: {answer})" in history


@pytest.mark.django_db
def test_an_expired_audit_items_page_says_it_closed_unanswered_not_that_an_answer_is_beside(
    settings, client, reviewer
):
    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = audit_items(run).get()
    Escalation.objects.filter(pk=item.pk).update(deadline=timezone.now() - timedelta(minutes=1))
    run_sweep_stalled()
    client.force_login(reviewer)
    page = client.get(f"/escalations/{item.pk}/").content.decode()
    assert "The answer beside is a label" not in page
    assert "It closed unanswered (expired): no label came of it" in page
