"""Bidirectional controls in untrusted or user-written text are written out ("[U+202E]"), never
obeyed, on every page that shows such text: policy labels on /policies/, guidance on the
decision pane and /guidance/, an integrator's tool description on the pane, goals in the runs
list and the queue, and the Django admin's run pages (issue 22, item 5)."""

import pytest
from django.urls import reverse

from escalations.models import EscalationStatus, ReviewGuidance
from guardian_core.untrusted import BIDI_CONTROLS, bidi_visible
from runs.models import Run
from tests.factories import make_policy_version, make_run
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

# Every control the filter writes out, in one string: U+202A–U+202E, U+2066–U+2069, the marks.
CONTROLS = "".join(BIDI_CONTROLS)
HOSTILE = f"pay {CONTROLS}gnp.exe now"
SHOWN = bidi_visible(HOSTILE)


def assert_shown(html: str) -> None:
    """No raw control anywhere on the page, and the text's visible form is there."""
    raw = sorted(f"U+{ord(c):04X}" for c in CONTROLS if c in html)
    assert raw == [], f"raw controls in the page: {raw}"
    assert SHOWN in html


def test_the_visible_form_names_every_control():
    assert SHOWN.startswith("pay [U+202A][U+202B][U+202C][U+202D][U+202E][U+2066]")
    assert "[U+200E][U+200F][U+061C]gnp.exe now" in SHOWN


def test_a_policy_label_on_the_policies_page(client, admin):
    make_policy_version(label=HOSTILE)
    client.force_login(admin)
    assert_shown(client.get(reverse("policies:list")).content.decode())


def test_guidance_and_an_integrators_tool_description_on_the_decision_pane(client, reviewer):
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    # The tool as an external run would define it (config.tools), with its own description.
    Run.objects.filter(pk=run.pk).update(
        config={
            **run.config,
            "tools": [
                {
                    "name": "issue_refund",
                    "description": HOSTILE,
                    "parameters": {"type": "object"},
                    "risk_class": "irreversible",
                }
            ],
        }
    )
    ReviewGuidance.objects.create(tool="issue_refund", text=HOSTILE)
    client.force_login(reviewer)
    page = client.get(reverse("escalations:detail", args=[escalation.pk])).content.decode()
    assert_shown(page)
    assert page.count(SHOWN) >= 2  # the description and the guidance


def test_guidance_on_the_guidance_page(client, admin):
    ReviewGuidance.objects.create(condition="integrity", text=HOSTILE)
    client.force_login(admin)
    assert_shown(client.get(reverse("guidance:list")).content.decode())


def test_a_goal_in_the_runs_list_and_the_queue(client, auditor, reviewer):
    make_run(goal=HOSTILE)
    client.force_login(auditor)
    assert_shown(client.get(reverse("runs:list")).content.decode())

    run = drive(start("refund_waits_for_approval"))
    Run.objects.filter(pk=run.pk).update(goal=HOSTILE)
    client.force_login(reviewer)
    assert_shown(client.get(reverse("escalations:queue")).content.decode())


def test_the_django_admins_run_pages(client, django_user_model):
    run = make_run(
        goal=HOSTILE,
        acceptance_criteria=[HOSTILE],
        final_answer=HOSTILE,
        last_error=HOSTILE,
        status="succeeded",
    )
    superuser = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(superuser)
    listing = client.get("/admin/runs/run/").content.decode()
    assert_shown(listing)
    change = client.get(f"/admin/runs/run/{run.pk}/change/").content.decode()
    assert_shown(change)
    assert change.count(SHOWN) >= 4  # goal, criteria, answer, last error


def test_a_token_name_on_the_tokens_page_and_its_revoke_page(client, admin):
    from guardian_core.services import api_token_create

    token, _secret = api_token_create(user=admin, name=HOSTILE)
    client.force_login(admin)
    assert_shown(client.get(reverse("tokens:list")).content.decode())
    assert_shown(client.get(reverse("tokens:revoke", args=[token.pk])).content.decode())


def test_a_token_name_is_shown_and_isolated_in_every_sentence_it_sits_in(client, admin):
    from guardian_core.services import api_token_create

    token, _secret = api_token_create(user=admin, name=HOSTILE)
    client.force_login(admin)
    for url in (reverse("tokens:list"), reverse("tokens:revoke", args=[token.pk])):
        for language in ("en", "fr"):
            html = client.get(url, headers={"accept-language": language}).content.decode()
            assert_shown(html)
            # In its own <bdi>: the name's direction cannot reorder the sentence around it.
            assert f"<bdi>{SHOWN}</bdi>" in html
