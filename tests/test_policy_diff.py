"""The difference between two policy versions, in words and on the admins' compare page."""

import pytest
from django.urls import reverse

from guardian_core.models import PolicyVersion
from guardian_core.said import english
from policies.policy_diff import version_diff
from tests.factories import make_policy_version

pytestmark = pytest.mark.django_db

QUESTION = "Does a tool output contain instructions?"


def unsaved(**overrides) -> PolicyVersion:
    # The function reads attributes only: an unsaved model is a version as good as a stored one.
    fields = {
        "number": 1,
        "label": "",
        "thresholds": {"integrity": {"c_stop": 1, "c_cont": 9, "t_star": 0.1, "delta": 0.05}},
        "question_set": {"integrity": QUESTION},
        "question_set_version": "builtin-1",
    }
    fields.update(overrides)
    return PolicyVersion(**fields)


def words(old: PolicyVersion, new: PolicyVersion) -> list[str]:
    return [english(change.words) for change in version_diff(old, new)]


def test_identical_versions_have_no_difference():
    assert version_diff(unsaved(), unsaved(number=2)) == []


def test_new_costs_read_as_the_t_star_they_move_with_both_costs():
    new = unsaved(
        thresholds={"integrity": {"c_stop": 1, "c_cont": 19, "t_star": 0.05, "delta": 0.05}}
    )
    assert words(unsaved(), new) == ["integrity t* 0.10 → 0.05 (C_stop 1 → 1, C_cont 9 → 19)"]


def test_a_narrower_band_reads_as_delta_old_to_new():
    new = unsaved(
        thresholds={"integrity": {"c_stop": 1, "c_cont": 9, "t_star": 0.1, "delta": 0.03}}
    )
    assert words(unsaved(), new) == ["integrity δ 0.05 → 0.03"]


def test_a_condition_added_or_removed_is_said_with_its_thresholds():
    both = {
        "integrity": {"c_stop": 1, "c_cont": 9, "t_star": 0.1, "delta": 0.05},
        "drift": {"c_stop": 1, "c_cont": 1, "t_star": 0.5, "delta": 0.1},
    }
    added = words(unsaved(), unsaved(thresholds=both))
    assert added == ["drift added (t* 0.50, C_stop 1, C_cont 1, δ 0.10)"]
    assert words(unsaved(thresholds=both), unsaved()) == [
        "drift removed (was t* 0.50, C_stop 1, C_cont 1, δ 0.10)"
    ]


def test_a_question_reworded_names_the_question_sets():
    new = unsaved(question_set={"integrity": "Is there an order?"}, question_set_version="my-2")
    assert words(unsaved(), new) == ["integrity question reworded (question set builtin-1 → my-2)"]


def test_a_new_question_set_name_with_the_same_wording_is_said_so():
    assert words(unsaved(), unsaved(question_set_version="my-2")) == [
        "question set builtin-1 → my-2, same wording"
    ]


def test_quorum_changes_say_who_needs_two_approvers():
    new = unsaved(quorum={"regulated": True, "tools": ["issue_refund"]})
    assert words(unsaved(), new) == [
        "quorum on regulated calls: one approver → two approvers",
        "quorum: two approvers now for issue_refund",
    ]
    assert words(new, unsaved(quorum={"regulated": True})) == [
        "quorum: one approver again for issue_refund"
    ]


def test_a_judge_added_removed_or_changed_is_said():
    judge = {"adapter": "openai", "model": "m-1", "conditions": ["integrity"], "timeout_seconds": 5}
    assert words(unsaved(), unsaved(judge=judge)) == ["judge added: m-1 (openai) on integrity, 5 s"]
    assert words(unsaved(judge=judge), unsaved()) == [
        "judge removed (was m-1 (openai) on integrity, 5 s)"
    ]
    assert words(unsaved(judge=judge), unsaved(judge={**judge, "model": "m-2"})) == [
        "judge model m-1 → m-2"
    ]


def test_limits_read_by_name_defaults_count_and_unknown_keys_read_generically():
    assert words(unsaved(), unsaved(limits={"drift_window": 4})) == ["drift window 3 → 4"]
    # The run-wide window is what both replanning conditions fall back to: both change.
    assert words(unsaved(), unsaved(limits={"hysteresis_window": 4})) == [
        "drift window 3 → 4",
        "stagnation window 3 → 4",
    ]
    # Spelling a default out changes nothing a run does, per condition or run-wide.
    assert words(unsaved(), unsaved(limits={"hysteresis_window": 3})) == []
    assert (
        words(
            unsaved(limits={"hysteresis_window": 4}),
            unsaved(limits={"drift_window": 4, "stagnation_window": 4}),
        )
        == []
    )
    assert words(unsaved(limits={"cool_down": 1}), unsaved(limits={"cool_down": 2})) == [
        "cool down 1 → 2"
    ]


def test_an_unknown_threshold_key_reads_generically():
    old = unsaved(thresholds={"integrity": {"c_stop": 1, "c_cont": 9, "delta": 0.05, "floor": 1}})
    new = unsaved(thresholds={"integrity": {"c_stop": 1, "c_cont": 9, "delta": 0.05, "floor": 2}})
    assert words(old, new) == ["integrity floor 1 → 2"]


def test_a_label_change_is_quoted():
    assert words(unsaved(label="a"), unsaved(label="b")) == ["label “a” → “b”"]


def test_the_page_shows_the_words_first_and_the_raw_values(client, admin):
    old = make_policy_version()
    new = make_policy_version(
        thresholds={"integrity": {"c_stop": 1, "c_cont": 19, "t_star": 0.05, "delta": 0.05}}
    )
    client.force_login(admin)
    response = client.get(reverse("policies:diff", args=[new.pk]), {"against": old.pk})
    assert response.status_code == 200
    page = response.content.decode()
    sentence = "integrity t* 0.10 → 0.05 (C_stop 1 → 1, C_cont 9 → 19)"
    assert sentence in page
    assert page.index(sentence) < page.index("Raw values")
    assert "{&quot;c_cont&quot;: 19, &quot;c_stop&quot;: 1}" in page


def test_a_french_admin_reads_the_differences_in_french_with_french_numbers(client, admin):
    old = make_policy_version()
    new = make_policy_version(
        thresholds={"integrity": {"c_stop": 1, "c_cont": 19, "t_star": 0.05, "delta": 0.05}},
        limits={"drift_window": 4},
        label="stricter",
    )
    client.force_login(admin)

    page = client.get(
        reverse("policies:diff", args=[new.pk]),
        {"against": old.pk},
        headers={"accept-language": "fr"},
    ).content.decode()

    assert "integrity t* 0,10 → 0,05 (C_stop 1 → 1, C_cont 9 → 19)" in page
    assert "fenêtre de dérive 3 → 4" in page
    assert "libellé (aucun) → «\xa0stricter\xa0»" in page
    assert "drift window" not in page


def test_identical_versions_on_the_page_say_no_difference(client, admin):
    old, new = make_policy_version(), make_policy_version()
    client.force_login(admin)
    response = client.get(reverse("policies:diff", args=[new.pk]), {"against": old.pk})
    assert "No difference" in response.content.decode()


def test_a_reworded_question_shows_as_such_and_escaped(client, admin):
    old = make_policy_version(question_set_version="builtin-1")
    new = make_policy_version(
        question_set={"integrity": "<script>alert(1)</script>"}, question_set_version="my-2"
    )
    client.force_login(admin)
    page = client.get(reverse("policies:diff", args=[new.pk]), {"against": old.pk}).content
    page = page.decode()
    assert "integrity question reworded (question set builtin-1 → my-2)" in page
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_without_against_the_page_compares_with_the_active_version(client, admin):
    active = make_policy_version(is_active=True)
    make_policy_version()
    new = make_policy_version()
    client.force_login(admin)
    response = client.get(reverse("policies:diff", args=[new.pk]))
    assert response.context["against"] == active


def test_without_against_or_active_the_page_compares_with_the_previous_number(client, admin):
    PolicyVersion.objects.update(is_active=False)
    first = make_policy_version(number=50)
    previous = make_policy_version(number=51)
    new = make_policy_version(number=52)
    client.force_login(admin)
    assert client.get(reverse("policies:diff", args=[new.pk])).context["against"] == previous
    assert client.get(reverse("policies:diff", args=[previous.pk])).context["against"] == first


def test_the_picker_lists_the_other_versions_and_pages_link_to_it(client, admin):
    old, new = make_policy_version(), make_policy_version()
    client.force_login(admin)
    diff_url = reverse("policies:diff", args=[new.pk])
    page = client.get(diff_url).content.decode()
    assert f'<option value="{old.pk}"' in page
    assert f'<option value="{new.pk}"' not in page
    assert diff_url in client.get(reverse("policies:detail", args=[new.pk])).content.decode()
    assert diff_url in client.get(reverse("policies:list")).content.decode()


@pytest.mark.parametrize("persona", ["reviewer", "auditor", "outsider"])
def test_other_roles_are_refused(client, persona, request):
    version = make_policy_version()
    client.force_login(request.getfixturevalue(persona))
    assert client.get(reverse("policies:diff", args=[version.pk])).status_code == 403


def test_signed_out_goes_to_the_login_page(client):
    version = make_policy_version()
    response = client.get(reverse("policies:diff", args=[version.pk]))
    assert response.status_code == 302
    assert response.url.startswith("/accounts/login/")


def test_a_label_with_bidi_controls_is_compared_as_inert_visible_text(client, admin):
    old = make_policy_version(label="plain")
    new = make_policy_version(label="<b>bold</b>\u202ex")
    client.force_login(admin)

    for language in ("en", "fr"):
        page = client.get(
            reverse("policies:diff", args=[new.pk]),
            {"against": old.pk},
            headers={"accept-language": language},
        ).content.decode()

        # The override would reverse what follows it, in the sentence and in the raw values.
        assert "\u202e" not in page
        assert "&lt;b&gt;bold&lt;/b&gt;[U+202E]x" in page
        assert "<b>bold</b>" not in page
