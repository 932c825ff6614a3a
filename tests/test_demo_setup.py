"""`make demo`'s setup: role groups after migrate, demo users who can sign in, seeded runs."""

import re

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from escalations.models import Escalation
from guardian_core.models import PolicyVersion
from guardian_core.roles import ROLES
from runs.models import Run
from runs.scenarios import scenario_names
from tests.runs_helpers import drive

pytestmark = pytest.mark.django_db


def test_migrate_leaves_one_group_per_role_with_exactly_its_permissions():
    for role in ROLES:
        group = Group.objects.get(name=role.name)
        granted = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()}
        assert granted == set(role.permissions), role.name


def test_demo_setup_prints_passwords_that_sign_each_role_in_to_its_own_page(client, capsys):
    call_command("demo_setup")
    printed = dict(
        re.findall(
            r"^\s+(reviewer|auditor|admin)\s+(\S+)$", capsys.readouterr().out, flags=re.MULTILINE
        )
    )
    assert set(printed) == {"reviewer", "auditor", "admin"}
    landing = {"reviewer": "/escalations/", "auditor": "/runs/", "admin": "/policies/"}
    for username, password in printed.items():
        # Through the login page, as a person signs in (and as the login throttle sees it).
        response = client.post("/accounts/login/", {"username": username, "password": password})
        assert response.status_code == 302, username
        response = client.get("/", follow=True)
        assert response.redirect_chain[-1][0] == landing[username]
        assert response.status_code == 200
        client.logout()


def test_demo_setup_starts_the_scenarios_once_and_changes_passwords_every_time(capsys):
    call_command("demo_setup")
    first = capsys.readouterr().out
    counts = (Run.objects.count(), Escalation.objects.count(), PolicyVersion.objects.count())
    call_command("demo_setup")
    second = capsys.readouterr().out
    assert "Demo runs already present." in second
    assert (
        Run.objects.count(),
        Escalation.objects.count(),
        PolicyVersion.objects.count(),
    ) == counts
    assert counts[0] == len(scenario_names())
    assert passwords(first).keys() == passwords(second).keys() == {"reviewer", "auditor", "admin"}
    assert set(passwords(first).values()).isdisjoint(passwords(second).values())


def passwords(printed: str) -> dict:
    return dict(re.findall(r"^\s+(reviewer|auditor|admin)\s+(\S+)$", printed, flags=re.MULTILINE))


def integrator_token(printed: str) -> str:
    return re.search(r"GUARDIAN_TOKEN=(\S+)", printed).group(1)


def test_demo_setup_prints_an_api_token_that_starts_an_external_run_and_replaces_the_last(
    capsys,
):
    call_command("demo_setup")
    first = integrator_token(capsys.readouterr().out)
    call_command("demo_setup")
    second = integrator_token(capsys.readouterr().out)
    lookup = {
        "name": "lookup_order",
        "description": "Read an order by its id.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        "risk_class": "read_only",
    }
    body = {"goal": "Refund ord_4472", "tools": [lookup], "actor": "external"}

    def start_with(token: str):
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return api.post(reverse("api:run-start"), body, format="json")

    started = start_with(second)
    assert started.status_code == 201, started.content
    assert started.json()["actor"] == "external"
    assert start_with(first).status_code == 403  # the earlier demo token was revoked
    # The agent loop is a machine: no password signs it in to the pages.
    assert not Run.objects.get(pk=started.json()["id"]).created_by.has_usable_password()


def test_the_demo_runs_fill_each_role_page_once_the_turns_ran(client, django_user_model, settings):
    # The default deadline: the demo's runs are judged by the local guardian, whose answer can
    # wait on a full garbage collection of a test process holding the training corpus.
    call_command("demo_setup")
    for run in Run.objects.all():
        drive(run)
    pages = {
        "reviewer": ("/escalations/", "ord_4472"),
        "auditor": ("/runs/", "stagnation"),
        "admin": ("/policies/", "Shipped defaults"),
    }
    for username, (url, expected_text) in pages.items():
        client.force_login(django_user_model.objects.get(username=username))
        assert expected_text in client.get(url).content.decode()
