"""Policy versions are validated in full before they are stored or activated, a run never starts
on an invalid one, and the Django admin shows versions read-only (the /policies/ pages change
them)."""

import copy

import pytest
from django.core.exceptions import ValidationError

from demo.setup import DEMO_QUESTIONS, demo_policy_version
from guardian_core.models import PolicyVersion
from guardian_core.policy_validation import policy_version_problems
from policies.admin import PolicyVersionAdmin
from policies.services import policy_version_activate, policy_version_create
from runs.models import Run, RunStatus
from runs.services import RunError, run_advance, run_start
from tests.factories import make_run, retire_active_policy_version

pytestmark = pytest.mark.django_db

COSTS = {
    "integrity": {"c_stop": 1, "c_cont": 9, "delta": 0.05},
    "risk": {"c_stop": 1, "c_cont": 9, "delta": 0.05},
    "infeasible": {"c_stop": 4, "c_cont": 1, "delta": 0.05},
    "goal_reached": {"c_stop": 4, "c_cont": 1, "delta": 0.05},
    "drift": {"c_stop": 1, "c_cont": 1, "delta": 0.1},
    "stagnation": {"c_stop": 1, "c_cont": 1, "delta": 0.1},
}


def thresholds(**changes) -> dict:
    """The valid costs above, with the named conditions replaced (None removes one)."""
    result = copy.deepcopy(COSTS)
    for name, values in changes.items():
        if values is None:
            result.pop(name)
        else:
            result[name] = values
    return result


def problems(**content) -> list[str]:
    fields = {
        "thresholds": thresholds(),
        "question_set": dict(DEMO_QUESTIONS),
        "question_set_version": "q-test",
    }
    fields.update(content)
    return policy_version_problems(**fields)


def stored_without_validation(**overrides) -> PolicyVersion:
    """A row as one saved before versions were validated (objects.create skips clean())."""
    fields = {
        "number": 7,
        "thresholds": {"integrity": "banana"},
        "question_set": dict(DEMO_QUESTIONS),
        "question_set_version": "q-bad",
    }
    fields.update(overrides)
    return PolicyVersion.objects.create(**fields)


# ---- what is valid ----------------------------------------------------------------------------


def test_the_valid_costs_and_the_demo_questions_have_no_problem():
    assert problems() == []


def test_a_threshold_that_is_not_an_object_is_refused_with_every_missing_condition_named():
    found = problems(thresholds={"integrity": "banana"})
    assert found[0].startswith("thresholds.integrity: must be an object with c_stop, c_cont")
    missing = {p.split(":")[0] for p in found[1:]}
    assert missing == {f"thresholds.{c}" for c in COSTS if c != "integrity"}


def test_every_bad_field_of_a_threshold_is_named_at_once():
    found = problems(
        thresholds=thresholds(
            integrity={"c_stop": 0, "c_cont": "nine", "delta": 0.7, "hysteresis": 2},
            risk={"c_stop": True, "c_cont": float("nan")},
        )
    )
    assert found == [
        "thresholds.integrity.hysteresis: unknown key (allowed: c_stop, c_cont, delta, t_star)",
        "thresholds.integrity.c_stop: must be a number > 0, got 0",
        "thresholds.integrity.c_cont: must be a number > 0, got 'nine'",
        "thresholds.integrity.delta: must be a number in [0, 0.5), got 0.7",
        "thresholds.risk.c_stop: must be a number > 0, got True",
        "thresholds.risk.c_cont: must be a number > 0, got nan",
        "thresholds.risk.delta: missing",
    ]


def test_a_t_star_that_disagrees_with_its_costs_is_refused():
    found = problems(thresholds=thresholds(integrity={**COSTS["integrity"], "t_star": 0.5}))
    assert found == [
        "thresholds.integrity.t_star: must equal c_stop / (c_stop + c_cont) = 0.1 "
        "(it is derived from the costs; leave it out), got 0.5"
    ]


def test_a_t_star_that_agrees_with_its_costs_is_accepted():
    assert problems(thresholds=thresholds(integrity={**COSTS["integrity"], "t_star": 0.1})) == []


def test_an_uncertain_band_reaching_outside_zero_to_one_is_refused():
    # t* = 0.1 with δ = 0.2: p = 0 is uncertain, so integrity would escalate on every turn.
    found = problems(thresholds=thresholds(integrity={"c_stop": 1, "c_cont": 9, "delta": 0.2}))
    assert len(found) == 1
    assert found[0].startswith("thresholds.integrity.delta: the uncertain band")


def test_unknown_conditions_and_empty_questions_are_refused():
    found = problems(
        thresholds=thresholds(banana={"c_stop": 1, "c_cont": 1, "delta": 0.1}),
        question_set={**DEMO_QUESTIONS, "risk": "  ", "weather": "Is it raining?"},
        question_set_version="",
    )
    assert found == [
        "thresholds.banana: unknown condition (known: integrity, risk, infeasible, "
        "goal_reached, drift, stagnation)",
        "question_set.weather: unknown condition (known: integrity, risk, infeasible, "
        "goal_reached, drift, stagnation)",
        "question_set.risk: must be non-empty text",
        "question_set_version: must be non-empty text",
    ]


def test_a_question_set_missing_a_condition_or_holding_nul_is_refused():
    questions = {**DEMO_QUESTIONS, "drift": "aligned?\x00"}
    del questions["stagnation"]
    assert problems(question_set=questions) == [
        "question_set.drift: must not contain NUL or unpaired surrogate characters",
        "question_set.stagnation: missing",
    ]


def test_content_that_is_not_json_objects_is_refused_without_crashing():
    assert problems(thresholds=None, question_set=["a"], question_set_version=3) == [
        "thresholds: must be an object with one entry per condition, got null",
        "question_set: must be an object with one question per condition, got list",
        "question_set_version: must be non-empty text",
    ]


# ---- the model, the services, the demo -----------------------------------------------------


def test_full_clean_of_a_banana_threshold_names_each_problem_under_its_field():
    version = PolicyVersion(
        number=3,
        thresholds={"integrity": "banana"},
        question_set={"weather": "Is it raining?"},
        question_set_version=" ",
    )
    with pytest.raises(ValidationError) as caught:
        version.full_clean()
    errors = caught.value.message_dict
    assert set(errors) == {"thresholds", "question_set", "question_set_version"}
    assert len(errors["thresholds"]) == 6  # integrity is not an object, five are missing
    assert len(errors["question_set"]) == 7  # weather is unknown, six are missing
    assert errors["question_set_version"] == ["question_set_version: must be non-empty text"]


def test_creating_a_version_stores_t_star_computed_from_the_costs():
    top = max(PolicyVersion.objects.values_list("number", flat=True), default=0)  # v1, shipped
    version = policy_version_create(
        thresholds=thresholds(), question_set=DEMO_QUESTIONS, question_set_version="q2"
    )
    version.refresh_from_db()
    assert version.thresholds["integrity"]["t_star"] == 0.1
    assert version.thresholds["goal_reached"]["t_star"] == 0.8
    assert version.number == top + 1  # the next number
    assert not version.is_active


def test_creating_an_invalid_version_stores_nothing():
    before = list(PolicyVersion.objects.values_list("pk", flat=True))  # the shipped default
    with pytest.raises(ValidationError) as caught:
        policy_version_create(
            thresholds={"integrity": "banana"},
            question_set=DEMO_QUESTIONS,
            question_set_version="q2",
        )
    assert "thresholds.integrity: must be an object" in str(caught.value)
    assert not PolicyVersion.objects.exclude(pk__in=before).exists()


def test_the_demo_policy_version_is_valid_and_active():
    version = demo_policy_version()
    version.full_clean()
    assert version.is_active
    assert version.problems() == []


def test_an_invalid_version_cannot_be_activated_and_the_active_one_stays():
    active = demo_policy_version()
    bad = stored_without_validation()
    with pytest.raises(ValidationError) as caught:
        policy_version_activate(version_id=bad.pk)
    assert "thresholds.integrity: must be an object" in " ".join(caught.value.messages)
    active.refresh_from_db()
    bad.refresh_from_db()
    assert (active.is_active, bad.is_active) == (True, False)


def test_activating_a_version_retires_the_one_active_before():
    first = demo_policy_version()
    second = policy_version_create(
        thresholds=thresholds(), question_set=DEMO_QUESTIONS, question_set_version="q2"
    )
    policy_version_activate(version_id=second.pk)
    assert list(PolicyVersion.objects.filter(is_active=True)) == [second]
    first.refresh_from_db()
    assert not first.is_active


def test_a_run_does_not_start_on_an_invalid_active_version():
    retire_active_policy_version()  # the shipped default
    stored_without_validation(is_active=True)
    with pytest.raises(RunError) as caught:
        run_start(goal="Refund ord_1", tools=["read_order"], actor="scripted", guardian="scripted")
    message = str(caught.value)
    assert "policy_version: the active version v7 is invalid" in message
    assert "thresholds.integrity: must be an object" in message
    assert not Run.objects.exists()


def test_a_run_pinned_to_an_invalid_version_fails_saying_why_not_with_a_type_error():
    run = make_run(policy_version=stored_without_validation(), status=RunStatus.RUNNING)
    assert run_advance(run_id=run.pk) == "failed"
    run.refresh_from_db()
    assert run.last_error.startswith("ValueError: policy version v7 is invalid:")
    assert "thresholds.integrity: must be an object" in run.last_error


# ---- the Django admin shows versions read-only ------------------------------------------------

ADMIN_URL = "/admin/guardian_core/policyversion/"


def test_the_django_admin_cannot_add_change_delete_or_activate_a_version(client, admin):
    import json

    version = demo_policy_version()
    before = PolicyVersion.objects.count()
    client.force_login(admin)

    listing = client.get(ADMIN_URL)
    added = client.post(
        f"{ADMIN_URL}add/",
        {
            "number": "99",
            "thresholds": json.dumps(thresholds()),
            "question_set": json.dumps(DEMO_QUESTIONS),
            "question_set_version": "q99",
        },
    )
    changed = client.post(f"{ADMIN_URL}{version.pk}/change/", {"label": "edited here"})
    deleted = client.post(f"{ADMIN_URL}{version.pk}/delete/", {"post": "yes"})
    acted = client.post(ADMIN_URL, {"action": "delete_selected", "_selected_action": [version.pk]})

    assert listing.status_code == 200
    assert "read-only here" in listing.content.decode()
    assert added.status_code == 403
    assert changed.status_code == 403
    assert deleted.status_code == 403
    assert acted.status_code in (200, 302)  # no such action: nothing happens
    version.refresh_from_db()
    assert version.label != "edited here"
    assert version.is_active
    assert PolicyVersion.objects.count() == before
    assert PolicyVersionAdmin.actions is None  # no activate or deactivate around the gate


def test_a_versions_admin_page_shows_every_field_and_points_to_the_editor(client, admin):
    version = demo_policy_version()
    client.force_login(admin)

    page = client.get(f"{ADMIN_URL}{version.pk}/change/").content.decode()

    assert "/policies/" in page
    for field in ("thresholds", "question_set", "quorum", "judge"):
        assert f"field-{field}" in page
    assert 'name="_save"' not in page
