"""Whoever starts a run through the API may read it (and cancel it); nobody else but auditors
may. An admin starts and cancels runs but does not drive external ones."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from rest_framework.test import APIClient

from demo.setup import demo_policy_version
from guardian_core.services import api_token_create

pytestmark = pytest.mark.django_db

SCENARIO = {
    "name": "api",
    "goal": "Tell the customer when order ord_1001 ships.",
    "tools": ["read_order"],
    "actor": {"turns": [{"calls": [], "message": "Tuesday."}]},
    "guardian": {"turns": [{"goal_reached": 0.97}]},
}


def token_client(user) -> APIClient:
    _, secret = api_token_create(user=user, name=f"{user}'s")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def started(client) -> int:
    demo_policy_version()
    response = client.post(
        reverse("api:run-start"),
        {
            "goal": SCENARIO["goal"],
            "tools": ["read_order"],
            "actor": "scripted",
            "guardian": "scripted",
            "config": {"scenario": SCENARIO},
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


def reads(client, run_id: int) -> list[int]:
    return [
        client.get(reverse(name, args=[run_id])).status_code
        for name in (
            "api:run-detail",
            "api:run-turn-list",
            "api:run-export",
            "api:run-decisions-csv",
        )
    ]


def test_an_admin_reads_the_run_it_started_and_not_another_admins(admin, django_user_model):
    client = token_client(admin)
    run_id = started(client)
    assert reads(client, run_id) == [200, 200, 200, 200]
    other = django_user_model.objects.create_user(username="other-admin")
    other.groups.add(Group.objects.get(name="admin"))
    assert reads(token_client(other), run_id) == [403, 403, 403, 403]


def test_an_integrator_reads_and_cancels_the_run_it_started_only(integrator, django_user_model):
    client = token_client(integrator)
    run_id = started(client)
    assert reads(client, run_id) == [200, 200, 200, 200]
    other = django_user_model.objects.create_user(username="other-loop")
    other.groups.add(Group.objects.get(name="integrator"))
    stranger = token_client(other)
    assert stranger.post(reverse("api:run-cancel", args=[run_id])).status_code == 403
    response = client.post(reverse("api:run-cancel", args=[run_id]))
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled"


def test_an_admin_does_not_drive_an_external_run(admin):
    demo_policy_version()
    response = token_client(admin).post(
        reverse("api:run-start"),
        {
            "goal": "g",
            "tools": ["read_order"],
            "actor": "external",
            "guardian": "scripted",
            "config": {"scenario": {**SCENARIO, "actor": {"turns": []}}},
        },
        format="json",
    )
    assert response.status_code == 403
    assert "runs.drive_run" in response.content.decode()
