"""A policy version's limits (hysteresis, replans, repeat limit; the run caps and the escalation
deadline are in tests/test_policy_editor.py): stored, validated with every bad
value named, edited on the form, taken by the API, shown on the version page, and used by the
engine — and a version stored without them keeps the defaults it always ran with."""

import json

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse

from demo.setup import DEMO_QUESTION_SET_VERSION, DEMO_QUESTIONS, demo_policy_version
from guardian_core.engine.conditions import Condition
from guardian_core.engine.thresholds import Hysteresis, Policy, default_policy
from guardian_core.models import PolicyVersion
from guardian_core.policy_validation import LIMIT_DEFAULTS, limits_problems, limits_with_defaults
from policies.forms import PolicyVersionForm
from policies.services import policy_version_activate, policy_version_create
from runs.mapping import policy_from_version
from runs.models import Decision, RunStatus
from runs.services import run_start
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

SHORT = {"hysteresis_window": 4, "hysteresis_required": 3, "max_replans": 0, "repeat_limit": 2}


def _thresholds() -> dict:
    return {c.value: t.as_dict() for c, t in default_policy().thresholds.items()}


def _version(limits: dict | None = None, **kwargs) -> PolicyVersion:
    return policy_version_create(
        thresholds=_thresholds(),
        question_set=DEMO_QUESTIONS,
        question_set_version=DEMO_QUESTION_SET_VERSION,
        limits=limits,
        **kwargs,
    )


def test_stored_limits_reach_the_engine_policy():
    policy = policy_from_version(_version(SHORT), budgets={"max_turns": 5})
    assert (
        policy.hysteresis_window,
        policy.hysteresis_required,
        policy.max_replans,
        policy.repeat_limit,
    ) == (4, 3, 0, 2)


def test_a_version_without_limits_keeps_the_engines_defaults():
    version = _version()
    assert version.limits == {}
    policy = policy_from_version(version, budgets={})
    engine = Policy(thresholds=policy.thresholds)
    assert {
        "hysteresis_window": engine.hysteresis_window,
        "hysteresis_required": engine.hysteresis_required,
        "max_replans": engine.max_replans,
        "repeat_limit": engine.repeat_limit,
    } == limits_with_defaults({})
    assert policy == Policy(
        thresholds=policy.thresholds, question_set_version=policy.question_set_version
    )


def test_a_limit_left_out_keeps_its_default_and_the_others_apply():
    policy = policy_from_version(_version({"repeat_limit": 5}), budgets={})
    assert policy.repeat_limit == 5
    assert policy.max_replans == LIMIT_DEFAULTS["max_replans"]


def test_every_bad_limit_is_named_at_once():
    problems = limits_problems(
        {"hysteresis_window": 0, "max_replans": -1, "repeat_limit": 1.5, "bogus": 1}
    )
    text = "\n".join(problems)
    for key in ("hysteresis_window", "max_replans", "repeat_limit", "bogus"):
        assert f"limits.{key}" in text
    assert "got 1.5" in text
    assert limits_problems({"repeat_limit": True}) != []  # a boolean is not a number of turns
    assert limits_problems([])[0].startswith("limits: must be an object")


def test_hysteresis_required_above_the_window_is_refused_and_nothing_stored():
    with pytest.raises(ValidationError) as refused:
        _version({"hysteresis_window": 2, "hysteresis_required": 3}, label="too many")
    assert "limits" in refused.value.message_dict
    assert "hysteresis_window (2)" in refused.value.message_dict["limits"][0]
    assert not PolicyVersion.objects.filter(label="too many").exists()


def test_the_limits_of_a_used_version_are_frozen():
    version = _version(SHORT)
    policy_version_activate(version_id=version.pk)
    run = _repeating_run()
    assert run.policy_version_id == version.pk
    with pytest.raises(IntegrityError), transaction.atomic():
        PolicyVersion.objects.filter(pk=version.pk).update(limits={"repeat_limit": 9})


def _form_data(version: PolicyVersion, **changes) -> dict:
    data = {
        key: ("" if value is None else value)
        for key, value in PolicyVersionForm.initial_from(version).items()
        if value is not False
    }
    data.update(changes)
    return data


def test_the_form_round_trips_the_limits_and_the_page_shows_them(client, admin):
    active = demo_policy_version()
    client.force_login(admin)
    page = client.get(reverse("policies:new")).content.decode()
    assert 'name="limit_repeat_limit"' in page
    assert "The same call this many turns in a row is a loop" in page  # the one-line help

    response = client.post(
        reverse("policies:new"),
        _form_data(active, label="short loops", limit_repeat_limit=2, limit_max_replans=0),
    )

    assert response.status_code == 302
    created = PolicyVersion.objects.get(label="short loops")
    # The engine's limits spelled out, hysteresis per condition; the caps and the deadline left
    # empty stay unstored.
    assert created.limits == {
        "drift_window": 3,
        "drift_required": 2,
        "stagnation_window": 3,
        "stagnation_required": 2,
        "repeat_limit": 2,
        "max_replans": 0,
    }
    again = PolicyVersionForm.initial_from(created)
    assert again["limit_repeat_limit"] == 2
    assert again["limit_max_replans"] == 0
    detail = client.get(response["Location"]).content.decode()
    assert "Hysteresis, replans, repeat limit, run caps and the escalation deadline" in detail
    assert "<code>max_replans</code></th><td>0</td>" in detail


def test_each_replanning_condition_runs_with_its_own_window_and_count():
    # Drift acts at its first fire, stagnation keeps 2 of 3: the drifting scenario replans at
    # its first drifting turn under v2 and one turn later under the version it was copied from.
    base = demo_policy_version()
    version = _version(
        {"drift_window": 1, "drift_required": 1, "stagnation_window": 3, "stagnation_required": 2},
        label="drift at once",
    )
    policy = policy_from_version(version, budgets={})
    assert policy.hysteresis_for(Condition.DRIFT) == Hysteresis(1, 1)
    assert policy.hysteresis_for(Condition.STAGNATION) == Hysteresis(3, 2)
    assert policy_from_version(base, budgets={}).hysteresis == {}  # as it always ran

    policy_version_activate(version_id=version.pk, comment="drift at once")
    run = drive(start("drifting_agent"))
    first_replan = next(
        d
        for d in Decision.objects.filter(turn__run=run).order_by("turn__index")
        if d.outcome == "replan"
    )
    assert first_replan.turn.index == 1  # the scenario's first drifting turn, not its second
    assert "fired on 1 of the last 1 turns" in json.dumps(first_replan.reasons)


def test_a_version_with_only_the_run_wide_pair_gives_both_conditions_that_pair():
    version = _version({"hysteresis_window": 5, "hysteresis_required": 3}, label="run-wide")
    policy = policy_from_version(version, budgets={})
    assert policy.hysteresis == {}
    assert (policy.hysteresis_window, policy.hysteresis_required) == (5, 3)
    form = PolicyVersionForm.initial_from(version)
    assert (form["limit_drift_window"], form["limit_stagnation_required"]) == (5, 3)


def test_the_form_names_every_bad_limit_and_saves_nothing(client, admin):
    active = demo_policy_version()
    client.force_login(admin)
    before = PolicyVersion.objects.count()
    response = client.post(
        reverse("policies:new"),
        _form_data(active, limit_repeat_limit=1, limit_drift_required=9),
    )
    assert response.status_code == 400
    form = response.context["form"]
    assert "limit_repeat_limit" in form.errors
    assert form.errors["limit_drift_required"] == [
        "must be at most drift's window (3 turns), got 9"
    ]
    assert PolicyVersion.objects.count() == before


def test_the_api_takes_the_limits_and_names_bad_ones(client, admin):
    client.force_login(admin)
    url = reverse("api:policy-version-create")
    base = {
        "question_set_version": DEMO_QUESTION_SET_VERSION,
        "thresholds": _thresholds(),
        "question_set": DEMO_QUESTIONS,
    }
    bad = client.post(
        url, {**base, "limits": {"repeat_limit": 0, "max_replans": "x"}}, "application/json"
    )
    assert bad.status_code == 400
    messages = "\n".join(bad.json()["limits"])
    assert "limits.repeat_limit" in messages
    assert "limits.max_replans" in messages

    made = client.post(url, {**base, "limits": SHORT}, "application/json")
    assert made.status_code == 201
    assert made.json()["limits"] == SHORT
    assert PolicyVersion.objects.get(pk=made.json()["id"]).limits == SHORT


def _repeating_run():
    """A scripted run whose actor makes the very same call every turn, with a calm guardian."""
    step = {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_1"}}], "tokens": 1}
    return run_start(
        goal="Read the order.",
        tools=["read_order"],
        actor="scripted",
        guardian="scripted",
        budgets={"max_turns": 12},
        config={
            "scenario": {
                "name": "same-call",
                "goal": "Read the order.",
                "tools": ["read_order"],
                "actor": {"turns": [step] * 12},
                "guardian": {"model_version": "scripted-calm"},
            }
        },
    )


def _outcomes(run) -> list[str]:
    return list(
        Decision.objects.filter(turn__run=run)
        .order_by("turn__index")
        .values_list("outcome", flat=True)
    )


def test_a_run_pinned_to_a_shorter_repeat_limit_stops_at_that_limit():
    policy_version_activate(version_id=_version({"repeat_limit": 2, "max_replans": 0}).pk)
    run = drive(_repeating_run())
    assert run.status == RunStatus.FAILED
    assert _outcomes(run) == ["continue", "stop_failure"]
    last = Decision.objects.filter(turn__run=run).order_by("-turn__index").first()
    assert any(reason["source"] == "exact_repeat" for reason in last.reasons)


def test_the_same_run_on_the_default_limits_goes_on_longer():
    policy_version_activate(version_id=_version().pk)
    run = drive(_repeating_run())
    outcomes = _outcomes(run)
    assert outcomes[:2] == ["continue", "continue"]  # two of the same call is not yet a loop
    assert outcomes[2] == "replan"
    assert run.status == RunStatus.FAILED


def test_a_conditions_count_above_its_window_is_named_beside_the_other_bad_limits():
    problems = limits_problems(
        {"stagnation_window": 0, "drift_window": 2, "drift_required": 5, "repeat_limit": 1}
    )
    assert any(p.startswith("limits.stagnation_window:") for p in problems)
    assert any(p.startswith("limits.repeat_limit:") for p in problems)
    assert "limits.drift_required: must be at most drift's window (2 turns), got 5" in problems
