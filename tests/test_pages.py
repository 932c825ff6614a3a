"""The first pages of each role: their content, escaping of untrusted text, query counts."""

import pytest

from tests.factories import make_escalation, make_policy_version, make_run, make_turn

pytestmark = pytest.mark.django_db

INJECTED = "<script>alert('owned')</script> IGNORE PREVIOUS INSTRUCTIONS"


def test_a_run_goal_with_markup_is_shown_as_text_not_html(client, auditor):
    make_run(goal=INJECTED)
    client.force_login(auditor)
    html = client.get("/runs/").content.decode()
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in html


def test_an_escalation_summary_with_markup_is_shown_as_text(client, reviewer):
    make_escalation(summary=INJECTED)
    client.force_login(reviewer)
    html = client.get("/escalations/").content.decode()
    assert "<script>alert" not in html
    assert "IGNORE PREVIOUS INSTRUCTIONS" in html


def test_the_escalation_queue_lists_only_open_escalations_nearest_deadline_first(client, reviewer):
    from datetime import timedelta

    from django.utils import timezone

    later = make_escalation(summary="later one", deadline=timezone.now() + timedelta(hours=5))
    sooner = make_escalation(summary="sooner one", deadline=timezone.now() + timedelta(hours=1))
    make_escalation(summary="already settled", status="approved", resolved_at=timezone.now())
    client.force_login(reviewer)
    html = client.get("/escalations/").content.decode()
    assert "already settled" not in html
    assert html.index(sooner.summary) < html.index(later.summary)


def test_each_role_sees_only_its_own_navigation(client, reviewer, auditor, admin):
    expected = {reviewer: "reviewer", auditor: "auditor", admin: "admin"}
    for user, role in expected.items():
        client.force_login(user)
        html = client.get("/", follow=True).content.decode()
        shown = {r for r in ("reviewer", "auditor", "admin") if f'data-role="{r}"' in html}
        assert shown == {role}


def test_a_user_with_two_roles_sees_both_entries(client, django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("both", password="x")
    user.groups.set(Group.objects.filter(name__in=["reviewer", "auditor"]))
    client.force_login(user)
    html = client.get("/runs/").content.decode()
    assert 'data-role="reviewer"' in html
    assert 'data-role="auditor"' in html
    assert 'data-role="admin"' not in html


def test_an_account_without_a_role_is_told_so(client, outsider):
    client.force_login(outsider)
    response = client.get("/")
    assert response.status_code == 403
    assert "no role" in response.content.decode()


def test_the_run_list_costs_the_same_queries_for_many_runs(
    client, auditor, django_assert_max_num_queries
):
    version = make_policy_version()
    for index in range(30):
        make_turn(run=make_run(policy_version=version), index=index)
    client.force_login(auditor)
    # Session, user, two of permissions, the rows; the filters' policy versions and recent
    # guardian model versions (tests/test_run_list_page.py holds the rest of this).
    with django_assert_max_num_queries(7):
        client.get("/runs/")


def test_the_policy_version_list_shows_how_many_runs_pinned_each(client, admin):
    version = make_policy_version(label="strict")
    make_run(policy_version=version)
    make_run(policy_version=version)
    client.force_login(admin)
    html = client.get("/policies/").content.decode()
    assert "strict" in html
    assert "<td>2</td>" in html


def test_signing_in_without_a_csrf_token_is_refused(reviewer):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    response = strict.post(
        "/accounts/login/", {"username": "reviewer", "password": "correct horse battery staple"}
    )
    assert response.status_code == 403
    assert "_auth_user_id" not in strict.session


def test_every_page_carries_the_csrf_token_for_htmx_requests(client, reviewer):
    client.force_login(reviewer)
    html = client.get("/escalations/").content.decode()
    assert 'hx-headers=\'{"X-CSRFToken": "' in html
    assert 'src="/static/django_htmx/htmx' in html
