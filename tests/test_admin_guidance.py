"""The admin's side of the review queue: guidance per condition and per tool, the policy
version's quorum, and the admin actions' messages."""

import pytest

from demo.setup import demo_policy_version
from escalations.models import ReviewGuidance
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

ADD_GUIDANCE = "/admin/escalations/reviewguidance/add/"


def test_an_admin_writes_guidance_for_a_condition_and_for_a_tool(client, admin):
    client.force_login(admin)

    for fields in (
        {"condition": "risk", "tool": "", "text": "Refunds over 500 need a second look."},
        {"condition": "", "tool": "issue_refund", "text": "Check the order was delivered."},
    ):
        response = client.post(ADD_GUIDANCE, fields)
        assert response.status_code == 302, response.content.decode()

    saved = {(g.condition, g.tool): g.text for g in ReviewGuidance.objects.all()}
    assert saved == {
        ("risk", ""): "Refunds over 500 need a second look.",
        ("", "issue_refund"): "Check the order was delivered.",
    }
    listing = client.get("/admin/escalations/reviewguidance/").content.decode()
    assert "Check the order was delivered." in listing


def test_guidance_naming_neither_a_condition_nor_a_tool_is_refused_in_the_form(client, admin):
    client.force_login(admin)
    response = client.post(ADD_GUIDANCE, {"condition": "", "tool": "", "text": "For everything"})
    assert response.status_code == 200
    assert "Name a condition, a tool, or both." in response.content.decode()
    assert not ReviewGuidance.objects.exists()


def test_the_tool_is_picked_from_the_registered_tools_not_typed(client, admin):
    client.force_login(admin)
    page = client.get(ADD_GUIDANCE).content.decode()
    assert '<option value="issue_refund">issue_refund</option>' in page

    response = client.post(ADD_GUIDANCE, {"condition": "", "tool": "isue_refund", "text": "x"})
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert not ReviewGuidance.objects.exists()


def test_reviewers_cannot_edit_guidance(client, reviewer):
    reviewer.is_staff = True
    reviewer.save(update_fields=["is_staff"])
    client.force_login(reviewer)
    assert client.get(ADD_GUIDANCE).status_code == 403


def test_the_policy_version_form_shows_the_quorum(client, admin):
    demo_policy_version()
    client.force_login(admin)
    page = client.get("/policies/new/").content.decode()
    assert 'name="quorum_regulated"' in page
    assert 'name="quorum_tools"' in page


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", password="pw")


def test_rejecting_in_the_admin_says_rejected(client, superuser):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    client.force_login(superuser)

    response = client.post(
        "/admin/escalations/escalation/",
        {"action": "reject", "_selected_action": [escalation.pk], "reason": "Insured parcel."},
        follow=True,
    )

    messages = [str(m) for m in response.context["messages"]]
    assert messages == [f"Escalation {escalation.pk}: rejected."]
