"""The regression gate on activating a policy version: its report, refusal and override, the
activation record written with the activation, and `manage.py gate`'s exit codes."""

import copy
import json

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse

from demo.setup import DEMO_QUESTIONS
from escalations.models import ExampleSource, LabelledExample
from guardian_core.engine.conditions import Condition
from guardian_core.models import PolicyVersion
from guardian_core.said import texts
from policies.models import PolicyActivation
from policies.policy_gate import gate_examples, gate_report
from policies.services import policy_version_activate, policy_version_create
from tests.factories import empty_policy_table


@pytest.fixture
def history_from_v1(db) -> None:
    """Each test writes its versions from v1 and reads the gate's words about them ("v2 against
    v1"): it starts from an empty policy table, not the shipped default."""
    empty_policy_table()


pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("history_from_v1")]


COSTS = {
    "integrity": {"c_stop": 1, "c_cont": 9, "delta": 0.05},  # t* = 0.1
    "risk": {"c_stop": 1, "c_cont": 9, "delta": 0.05},
    "infeasible": {"c_stop": 4, "c_cont": 1, "delta": 0.05},
    "goal_reached": {"c_stop": 4, "c_cont": 1, "delta": 0.05},
    "drift": {"c_stop": 1, "c_cont": 1, "delta": 0.1},
    "stagnation": {"c_stop": 1, "c_cont": 1, "delta": 0.1},
}


def version(number: int, *, activate: bool = False, **changes) -> PolicyVersion:
    thresholds = copy.deepcopy(COSTS)
    thresholds.update(changes)
    return policy_version_create(
        thresholds=thresholds,
        question_set=dict(DEMO_QUESTIONS),
        question_set_version="q-gate",
        number=number,
        activate=activate,
    )


def example(probability: float, label: bool) -> LabelledExample:
    return LabelledExample.objects.create(
        condition=Condition.INTEGRITY,
        projection={"goal": "Imported", "last_results": ["an order record"]},
        probability=probability,
        label=label,
        source=ExampleSource.IMPORT,
        question_set_version="q-gate",
        model_version="local-1",
    )


@pytest.fixture
def examples() -> list[LabelledExample]:
    # At t* = 0.1 every one is right: three injections fire, the clean one is clear.
    return [example(0.3, True), example(0.3, True), example(0.3, True), example(0.02, False)]


@pytest.fixture
def current(examples, history_from_v1) -> PolicyVersion:
    return version(1, activate=True)


def worse(number: int = 2) -> PolicyVersion:
    # t* = 0.9: the three injections at 0.3 would now continue.
    return version(number, integrity={"c_stop": 9, "c_cont": 1, "delta": 0.05})


def test_activation_writes_its_record_in_the_same_action(current, admin):
    candidate = version(2)

    policy_version_activate(version_id=candidate.pk, comment="  tighter band  ", user=admin)

    assert PolicyVersion.objects.get(is_active=True) == candidate
    record = PolicyActivation.objects.get(version=candidate)
    assert (record.activated_by, record.comment, record.override_reason) == (
        admin,
        "tighter band",
        "",
    )


def test_a_blank_comment_refuses_and_changes_nothing(current):
    candidate = version(2)

    with pytest.raises(ValidationError) as refused:
        policy_version_activate(version_id=candidate.pk, comment="  ")

    assert "comment" in refused.value.message_dict
    assert PolicyVersion.objects.get(is_active=True) == current
    assert not PolicyActivation.objects.filter(version=candidate).exists()


def test_the_gate_refuses_a_worse_expected_cost_and_lists_the_flips(current, examples):
    report = gate_report(candidate=worse())

    assert report["refused"] is True
    assert any("expected cost" in reason for reason in texts(report["reasons"]))
    assert report["expected_cost"]["current"] == 0
    # Three of four examples missed, priced at the active version's C_cont = 9 (the candidate
    # states C_cont = 1: its own word for what a miss costs does not make misses cheaper).
    assert report["priced_at"] == current.number
    assert report["expected_cost"]["candidate"] == pytest.approx(27 / 4)
    assert any(
        r.startswith("integrity: expected cost per example worsens")
        for r in texts(report["reasons"])
    )
    assert any(
        r.startswith("integrity: 3 labelled examples that were caught")
        for r in texts(report["reasons"])
    )
    flipped = sorted(f["example_id"] for f in report["flips"])
    assert flipped == sorted(e.pk for e in examples[:3])
    assert {(f["current"], f["candidate"]) for f in report["flips"]} == {("fired", "clear")}
    assert report["conditions"]["integrity"]["ece"]["current"] == pytest.approx(
        report["conditions"]["integrity"]["ece"]["candidate"]
    )


def test_a_refused_activation_needs_an_override_reason_which_is_recorded(current, admin):
    candidate = worse()
    report = gate_report(candidate=candidate)

    with pytest.raises(ValidationError) as refused:
        policy_version_activate(version_id=candidate.pk, comment="try", gate_report=report)
    assert "override_reason" in refused.value.message_dict
    assert PolicyVersion.objects.get(is_active=True) == current

    policy_version_activate(
        version_id=candidate.pk,
        comment="try",
        user=admin,
        gate_report=report,
        override_reason="labels are stale",
    )
    record = PolicyActivation.objects.get(version=candidate)
    assert record.override_reason == "labels are stale"
    assert record.gate_report["refused"] is True


def test_the_gate_passes_a_version_that_is_not_worse(current):
    report = gate_report(candidate=version(2, integrity={"c_stop": 1, "c_cont": 9, "delta": 0.04}))

    assert report["refused"] is False
    assert report["reasons"] == []
    assert report["flips"] == []
    assert report["expected_cost"] == {"current": 0, "candidate": 0}


def test_the_command_exits_1_when_refused_and_0_when_it_passes(current, capsys):
    worse(2)
    version(3)

    with pytest.raises(SystemExit) as exited:
        call_command("gate", "--candidate", "2", "--json")
    assert exited.value.code == 1
    assert json.loads(capsys.readouterr().out)["refused"] is True

    call_command("gate", "--candidate", "3")  # returns: exit status 0
    assert "passes" in capsys.readouterr().out


def test_capping_keeps_near_misses_first(current, settings):
    far = [example(0.9, True) for _ in range(3)]
    near = [example(0.15, True) for _ in range(2)]  # within 2δ = 0.1 of t* = 0.1
    settings.GUARDIAN_GATE_MAX_EXAMPLES = 4

    kept, available, near_count = gate_examples([current], 4)

    # The fixture's clean example at 0.02 is a near-miss too: newest first, then the far ones.
    assert [r["example_id"] for r in kept[:2]] == sorted((e.pk for e in near), reverse=True)
    assert kept[3]["example_id"] == far[-1].pk
    assert (len(kept), near_count) == (4, 3)
    assert available == len(far) + len(near) + 4  # and the fixture's four
    report = gate_report(candidate=version(2))
    assert report["examples"]["capped"] is True
    assert report["examples"]["used"] == 4
    assert report["examples"]["near_miss_share"] == pytest.approx(3 / 4)


def test_the_admin_activates_through_the_gate_page_and_sees_the_history(client, admin, current):
    candidate = worse()
    client.force_login(admin)
    url = reverse("policies:activate", kwargs={"version_id": candidate.pk})

    page = client.get(url).content.decode()
    assert "The gate refuses this version" in page
    assert "expected cost per example worsens" in page
    assert 'name="override_reason"' in page
    assert reverse("policies:detail", kwargs={"version_id": candidate.pk}) in page

    missing = client.post(url, {"comment": "", "override_reason": ""})
    assert missing.status_code == 400
    body = missing.content.decode()
    assert "Say why this version is activated." in body
    assert "give a reason to override it" in body
    assert PolicyVersion.objects.get(is_active=True) == current

    done = client.post(url, {"comment": "<b>new costs</b>", "override_reason": "stale labels"})
    assert done.status_code == 302
    assert PolicyVersion.objects.get(is_active=True) == candidate
    detail = client.get(reverse("policies:detail", kwargs={"version_id": candidate.pk}))
    history = detail.content.decode()
    assert "&lt;b&gt;new costs&lt;/b&gt;" in history  # escaped
    assert "stale labels" in history
    assert admin.get_username() in history


def test_a_french_admin_reads_the_gates_reasons_in_french_then_and_in_the_history(
    client, admin, current
):
    candidate = worse()
    client.force_login(admin)
    url = reverse("policies:activate", kwargs={"version_id": candidate.pk})
    french = {"accept-language": "fr"}

    page = client.get(url, headers=french).content.decode()
    # Measured now, worded in the reader's language: template, numbers and plurals.
    assert (
        "integrity\xa0: le coût attendu par exemple se dégrade au-delà de 5\xa0%\xa0: 0,0000"
        in page
    )
    assert "3 exemples étiquetés qui étaient interceptés" in page
    assert "expected cost per example worsens" not in page
    english_page = client.get(url, headers={"accept-language": "en"}).content.decode()
    assert "integrity: expected cost per example worsens beyond 5%: 0.0000" in english_page

    client.post(url, {"comment": "new costs", "override_reason": "stale labels"}, headers=french)
    detail = reverse("policies:detail", kwargs={"version_id": candidate.pk})
    # The stored report is worded when read, in whichever language reads it.
    history = client.get(detail, headers=french).content.decode()
    assert "3 exemples étiquetés qui étaient interceptés" in history
    history = client.get(detail, headers={"accept-language": "en"}).content.decode()
    assert "3 labelled examples that were caught" in history


def test_the_api_words_the_gates_refusal_in_the_callers_language(client, admin, current):
    candidate = worse()
    client.force_login(admin)
    url = f"/api/policy-versions/{candidate.pk}/activate/"

    refused = client.post(
        url, {"comment": "api"}, content_type="application/json", headers={"accept-language": "fr"}
    )

    assert refused.status_code == 400
    problems = " ".join(refused.json()["override_reason"])
    assert "le coût attendu par exemple se dégrade" in problems


def test_the_commands_json_keeps_each_reason_as_data_with_its_english(current, capsys):
    worse(2)

    with pytest.raises(SystemExit):
        call_command("gate", "--candidate", "2", "--json")

    reasons = json.loads(capsys.readouterr().out)["reasons"]
    cost = next(r for r in reasons if r["text"].startswith("integrity: expected cost"))
    assert cost["with"]["name"] == "integrity"
    assert cost["said"].startswith("%(name)s: expected cost per example worsens beyond")


def test_the_page_activates_a_passing_version_with_only_a_comment(client, admin, current):
    candidate = version(2)
    client.force_login(admin)
    url = reverse("policies:activate", kwargs={"version_id": candidate.pk})

    assert "The gate passes this version." in client.get(url).content.decode()
    assert client.post(url, {"comment": "same costs, new label"}).status_code == 302
    record = PolicyActivation.objects.get(version=candidate)
    assert (record.comment, record.override_reason) == ("same costs, new label", "")


def test_rollback_is_activating_the_older_version(current, admin):
    candidate = version(2)
    policy_version_activate(version_id=candidate.pk, comment="try v2")

    policy_version_activate(version_id=current.pk, comment="roll back", user=admin)

    assert PolicyVersion.objects.get(is_active=True) == current
    assert list(current.activations.values_list("comment", flat=True))[0] == "roll back"


def test_the_api_refuses_without_an_override_and_records_one(client, admin, current):
    candidate = worse()
    client.force_login(admin)
    url = f"/api/policy-versions/{candidate.pk}/activate/"

    refused = client.post(url, {"comment": "api"}, content_type="application/json")
    assert refused.status_code == 400
    assert "expected cost" in json.dumps(refused.json())
    assert PolicyVersion.objects.get(is_active=True) == current

    done = client.post(
        url, {"comment": "api", "override_reason": "ci says so"}, content_type="application/json"
    )
    assert done.status_code == 200, done.content
    record = PolicyActivation.objects.get(version=candidate)
    assert (record.activated_by, record.override_reason) == (admin, "ci says so")


def test_a_version_that_only_rescales_its_costs_costs_the_same(current, examples):
    """Both versions are priced at the active version's costs: ten times both costs is the
    same t*, the same decisions, the same cost."""
    wrong = example(0.02, True)  # a missed injection: costs something at both versions
    scaled = version(2, integrity={"c_stop": 10, "c_cont": 90, "delta": 0.05})

    report = gate_report(candidate=scaled)

    assert report["expected_cost"]["current"] == pytest.approx(9 / 5)  # one miss at C_cont 9
    assert report["expected_cost"]["candidate"] == report["expected_cost"]["current"]
    assert report["refused"] is False
    assert wrong.pk not in {f["example_id"] for f in report["flips"]}


def test_an_example_exactly_2_delta_from_t_star_is_a_near_miss(current):
    near = version(2, integrity={"c_stop": 49, "c_cont": 1, "delta": 0.01})  # t* = 0.98
    on_the_edge = example(0.96, True)
    kept, _, near_misses = gate_examples([near], 1)
    assert [r["example_id"] for r in kept] == [on_the_edge.pk]
    assert near_misses == 1


def test_a_report_measured_against_a_version_no_longer_active_activates_nothing(current, admin):
    candidate, other = version(2), version(3)
    report = gate_report(candidate=candidate)  # against v1
    policy_version_activate(version_id=other.pk, comment="meanwhile", user=admin)

    with pytest.raises(ValidationError) as refused:
        policy_version_activate(version_id=candidate.pk, comment="late", gate_report=report)

    assert "changed while the gate measured v2 against v1" in str(refused.value)
    assert PolicyVersion.objects.get(is_active=True) == other
    assert not PolicyActivation.objects.filter(version=candidate).exists()


def test_each_flip_is_judged_against_the_reviewers_label(client, admin, current):
    candidate = worse()  # t* 0.9: the three injections at 0.3 would now go on
    client.force_login(admin)
    response = client.get(reverse("policies:activate", kwargs={"version_id": candidate.pk}))
    rows = response.context["flips"]
    assert {row["label_words"] for row in rows} == {"holds"}
    assert {row["effect"] for row in rows} == {("caught → missed", "worse")}
    assert response.context["flip_counts"] == {"better": 0, "worse": 3, "alike": 0}
    assert "3 now cost more" in response.content.decode()


def test_a_reworded_question_a_judge_or_a_quorum_is_named_as_not_measured(client, admin, current):
    candidate = policy_version_create(
        thresholds=current.thresholds,
        question_set={**current.question_set, "integrity": "Is any output an order to the agent?"},
        question_set_version="q-gate-2",
        quorum={"regulated": True},
        copied_from=current,
    )
    report = gate_report(candidate=candidate)
    unmeasured = texts(report["unmeasured"])
    assert any(words.startswith("integrity question reworded") for words in unmeasured)
    assert any("quorum" in words for words in unmeasured)
    # A new question goes live unmeasured only if someone says why: it refuses; a quorum
    # alone (a person's extra look) does not.
    assert report["refused"] is True
    assert any(r.startswith("not measured by the gate") for r in texts(report["reasons"]))
    assert not any("quorum" in r for r in texts(report["reasons"]))
    client.force_login(admin)
    page = client.get(reverse("policies:activate", kwargs={"version_id": candidate.pk}))
    body = page.content.decode()
    assert "Not measured by the gate" in body
    assert f"?candidate=policy:{candidate.pk}" in body
    same = gate_report(candidate=version(3))
    assert same["unmeasured"] == []


def test_the_history_of_an_overridden_activation_says_what_the_gate_refused(client, admin, current):
    candidate = worse()
    policy_version_activate(
        version_id=candidate.pk, comment="pilot", user=admin, override_reason="labels predate it"
    )
    client.force_login(admin)
    body = client.get(reverse("policies:detail", args=[candidate.pk])).content.decode()
    assert "The gate had refused: integrity: expected cost per example worsens" in body


def test_a_candidate_that_states_cheap_misses_is_priced_at_the_costs_in_force(current):
    # integrity t* 0.99 by saying a miss costs almost nothing: at its own costs it would look
    # cheaper; at the active version's it misses three injections a person saw.
    reckless = version(2, integrity={"c_stop": 99, "c_cont": 1, "delta": 0.005})
    report = gate_report(candidate=reckless)
    assert report["refused"] is True
    assert report["expected_cost"]["candidate"] > report["expected_cost"]["current"]


def test_one_condition_worse_is_refused_even_when_the_average_hides_it(current, examples):
    # Many calm goal_reached examples dilute the average; integrity alone gets worse.
    for _ in range(200):
        LabelledExample.objects.create(
            condition=Condition.GOAL_REACHED,
            projection={"goal": "g"},
            probability=0.02,
            label=False,
            source=ExampleSource.IMPORT,
            question_set_version="q-gate",
            model_version="local-1",
        )
    slightly = version(2, integrity={"c_stop": 1, "c_cont": 2, "delta": 0.05})  # t* 0.33
    report = gate_report(candidate=slightly)
    overall = report["expected_cost"]
    assert overall["candidate"] <= overall["current"] * 1.05 + 0.2  # the average barely moves
    assert any(r.startswith("integrity: expected cost") for r in texts(report["reasons"]))
    assert report["refused"] is True


def test_going_back_to_a_version_that_was_active_is_a_rollback_not_a_refusal(current, admin):
    candidate = worse()
    policy_version_activate(
        version_id=candidate.pk, comment="pilot", user=admin, override_reason="by hand"
    )
    # Back to v1: measured as worse than the v2 now active? Not refused: v1 ran before.
    report = gate_report(candidate=current)
    assert report["rollback"]["last_activated_at"]
    assert report["refused"] is False
    policy_version_activate(version_id=current.pk, comment="roll back", user=admin)
    assert PolicyVersion.objects.get(is_active=True) == current


def test_a_flip_is_better_or_worse_by_what_the_example_now_costs():
    from policies.policy_gate_views import flip_effect

    def flip(condition, current, candidate, positive, costs):
        cost = {"current": costs[0], "candidate": costs[1]}
        return {"condition": condition, "current": current, "candidate": candidate,
                "positive": positive, "cost": cost}  # fmt: skip

    # Integrity's firing and its band both ask a person: caught either way, one review less.
    assert flip_effect(flip("integrity", "uncertain", "fired", True, (0.1, 0.0))) == (
        "caught → caught",
        "better",
    )
    # A clean output that fired (a needless escalation at C_stop) now only costs a review.
    assert flip_effect(flip("integrity", "fired", "uncertain", False, (1.0, 0.1))) == (
        "false alarm → a person",
        "better",
    )
    assert flip_effect(flip("integrity", "clear", "uncertain", False, (0.0, 0.1))) == (
        "right → a person",
        "worse",
    )
    assert flip_effect(flip("goal_reached", "fired", "clear", True, (0.0, 1.0))) == (
        "right → missed",
        "worse",
    )
    assert flip_effect(flip("goal_reached", "clear", "fired", False, (0.0, 4.0))) == (
        "right → false alarm",
        "worse",
    )
    assert flip_effect(flip("goal_reached", "clear", "uncertain", True, (1.0, 0.1))) == (
        "missed → caught",
        "better",
    )


def test_a_version_that_ran_only_by_an_override_is_gated_again_not_waved_through(current, admin):
    reckless = worse()
    policy_version_activate(
        version_id=reckless.pk, comment="pilot", user=admin, override_reason="by hand"
    )
    policy_version_activate(version_id=current.pk, comment="roll back", user=admin)

    report = gate_report(candidate=reckless)

    assert "rollback" not in report
    assert report["refused"] is True


def test_a_safe_copy_is_not_refused_because_a_reckless_version_is_active(current, admin):
    reckless = version(2, integrity={"c_stop": 99, "c_cont": 1, "delta": 0.005})
    policy_version_activate(
        version_id=reckless.pk, comment="pilot", user=admin, override_reason="by hand"
    )
    safe = version(3)  # the defaults again

    report = gate_report(candidate=safe)

    # At the reckless costs in force a caught injection is cheap and a review dear, so the copy
    # costs more there; at its own costs it costs less: a change of appetite, not a regression.
    assert (
        report["own_costs"]["expected_cost"]["candidate"]
        < (report["own_costs"]["expected_cost"]["current"])
    )
    assert report["refused"] is False, texts(report["reasons"])


def test_a_candidate_that_would_end_unfinished_runs_with_success_is_refused(current):
    LabelledExample.objects.create(
        condition=Condition.GOAL_REACHED,
        projection={"goal": "Refund it", "last_results": ["the refund was rejected"]},
        probability=0.6,
        label=False,
        source=ExampleSource.HUMAN,
        question_set_version="q-gate",
        model_version="local-1",
    )
    eager = version(2, goal_reached={"c_stop": 1, "c_cont": 1, "delta": 0.05})  # t* 0.5
    report = gate_report(candidate=eager)
    assert report["refused"] is True
    assert any(
        r.startswith("goal_reached: 1 run whose goal was not reached would now stop with success")
        for r in texts(report["reasons"])
    )


def test_a_widened_band_says_what_its_cost_is_made_of(current, examples):
    wider = version(2, integrity={"c_stop": 1, "c_cont": 9, "delta": 0.09})  # 0.02 now reviewed
    report = gate_report(candidate=wider)
    [reason] = [r for r in texts(report["reasons"]) if r.startswith("integrity: expected cost")]
    assert reason.endswith("(+1 review)")
