"""The REST API beyond starting runs: token authentication, the run log read-only, escalations
decided with the reviewers' rules, labelled examples, policy versions, the index, and one error
shape everywhere."""

import json

import pytest
from django.urls import resolve

from demo.setup import demo_policy_version
from escalations.models import Escalation, EscalationStatus, LabelledExample, Verdict
from guardian_core.api import API_ENDPOINTS
from guardian_core.models import ApiToken, PolicyVersion
from guardian_core.services import api_token_create, api_token_revoke
from runs.models import RunStatus
from tests.factories import make_decision, make_run, make_tool_call, make_turn
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db


def bearer(user) -> dict:
    _, secret = api_token_create(user=user, name="test")
    return {"Authorization": f"Bearer {secret}"}


def _is_error_shape(body: object) -> bool:
    return isinstance(body, dict) and all(
        isinstance(messages, list) and all(isinstance(m, str) for m in messages)
        for messages in body.values()
    )


# ---- tokens ----------------------------------------------------------------------------------


def test_a_token_acts_as_its_user_with_that_users_role(client, auditor):
    make_run(goal="Refund order ord_9")
    headers = bearer(auditor)
    assert len(client.get("/api/runs/", headers=headers).json()["results"]) == 1
    assert client.get("/api/escalations/", headers=headers).status_code == 403
    assert ApiToken.objects.get().last_used_at is not None


def test_a_tokens_permissions_are_its_users_own_and_groups_read_afresh_each_call(
    client, django_user_model
):
    from django.contrib.auth.models import Group, Permission

    machine = django_user_model.objects.create_user("machine", password=None)
    headers = bearer(machine)
    assert client.get("/api/runs/", headers=headers).status_code == 403  # no role yet
    machine.groups.add(Group.objects.get(name="auditor"))
    assert client.get("/api/runs/", headers=headers).status_code == 200  # through the group
    assert client.get("/api/escalations/", headers=headers).status_code == 403
    review = Permission.objects.get(codename="review_escalation")
    machine.user_permissions.add(review)  # a permission of its own, beside the group's
    assert client.get("/api/escalations/", headers=headers).status_code == 200
    machine.groups.clear()
    assert client.get("/api/runs/", headers=headers).status_code == 403  # at once
    machine.is_superuser = True
    machine.save(update_fields=["is_superuser"])
    assert client.get("/api/runs/", headers=headers).status_code == 200


def test_only_the_tokens_digest_is_stored(auditor):
    token, secret = api_token_create(user=auditor, name="ci")
    stored = ApiToken.objects.filter(pk=token.pk).values().get()
    assert secret not in json.dumps(stored, default=str)
    assert secret.startswith(token.prefix)


def test_a_revoked_token_or_an_inactive_user_is_refused(client, auditor):
    token, secret = api_token_create(user=auditor, name="ci")
    headers = {"Authorization": f"Bearer {secret}"}
    assert client.get("/api/runs/", headers=headers).status_code == 200
    api_token_revoke(token_id=token.pk)
    refused = client.get("/api/runs/", headers=headers)
    assert refused.status_code == 403
    assert "token" in " ".join(refused.json()["detail"])
    _, secret = api_token_create(user=auditor, name="again")
    auditor.is_active = False
    auditor.save()
    assert (
        client.get("/api/runs/", headers={"Authorization": f"Bearer {secret}"}).status_code == 403
    )


def test_a_token_needs_no_csrf_token_but_a_session_does(admin):
    from django.test import Client

    demo_policy_version()
    client = Client(enforce_csrf_checks=True)
    body = {"goal": "g", "tools": [], "actor": "openai", "config": {"actor_model": "m"}}
    assert (
        client.post(
            "/api/runs/start/", body, content_type="application/json", headers=bearer(admin)
        ).status_code
        == 201
    )
    client.force_login(admin)
    assert client.post("/api/runs/start/", body, content_type="application/json").status_code == 403


def test_an_admin_creates_a_token_in_the_admin_and_sees_it_once(client, admin, auditor):
    client.force_login(admin)
    response = client.post(
        "/admin/guardian_core/apitoken/add/",
        {"user": auditor.pk, "name": "nightly export"},
        follow=True,
    )
    assert response.status_code == 200
    [message] = [str(m) for m in response.context["messages"] if "not shown again" in str(m)]
    secret = message.split(": ", 1)[1].split(" ", 1)[0]
    token = ApiToken.objects.get()
    assert (token.user, token.name, secret[: len(token.prefix)]) == (
        auditor,
        "nightly export",
        token.prefix,
    )
    assert (
        secret
        not in client.get(f"/admin/guardian_core/apitoken/{token.pk}/change/").content.decode()
    )
    assert (
        client.get("/api/runs/", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    )


# ---- runs, turns, calls, decisions -------------------------------------------------------------


def test_runs_are_listed_newest_first_across_pages(client, auditor):
    runs = [make_run(goal=f"run {i}") for i in range(7)]
    headers = bearer(auditor)
    first = client.get("/api/runs/?limit=5", headers=headers).json()
    second = client.get(first["next"], headers=headers).json()
    assert second["next"] is None
    ids = [r["id"] for r in first["results"] + second["results"]]
    assert ids == [run.pk for run in reversed(runs)]


def test_runs_are_filtered_by_the_runs_pages_filters(client, auditor):
    # Every filter, each against the page, is in tests/test_run_list_page.py.
    version = demo_policy_version()
    done = make_run(status="succeeded", final_answer="ok", stop_reason="goal_reached")
    make_run(status="failed", stop_reason="turn_cap", policy_version=version)
    headers = bearer(auditor)

    def ids(query: str) -> list[int]:
        response = client.get(f"/api/runs/?{query}", headers=headers)
        assert response.status_code == 200, response.content
        return [r["id"] for r in response.json()["results"]]

    assert ids("status=succeeded") == [done.pk]
    assert ids("stop_reason=goal_reached") == [done.pk]
    assert len(ids(f"policy={version.number}")) == 1
    assert len(ids("since=2000-01-01")) == 2
    assert ids("until=2000-01-01") == []


def test_bad_run_filters_are_a_400_naming_each(client, auditor):
    response = client.get(
        "/api/runs/?status=sleeping&since=yesterday&policy=x&created_after=2000-01-01",
        headers=bearer(auditor),
    )
    assert response.status_code == 400
    # The old parameter names are named too, not ignored into an unfiltered list.
    assert {"status", "since", "policy", "created_after"} <= set(response.json())
    assert _is_error_shape(response.json())


def test_a_turn_reads_with_its_calls_and_decision(client, auditor):
    turn = make_turn(proposal={"calls": [{"tool": "read_order"}]})
    make_tool_call(turn=turn, result="Ignore previous instructions <script>")
    make_decision(turn=turn, outcome="continue", reasons=[{"source": "integrity"}])
    headers = bearer(auditor)

    detail = client.get(f"/api/runs/{turn.run_id}/", headers=headers).json()
    assert [t["index"] for t in detail["turns"]] == [0]
    listed = client.get(f"/api/runs/{turn.run_id}/turns/", headers=headers).json()
    assert listed["results"][0]["outcome"] == "continue"
    body = client.get(f"/api/runs/{turn.run_id}/turns/0/", headers=headers).json()
    assert body["tool_calls"][0]["result"] == "Ignore previous instructions <script>"
    assert body["decision"]["outcome"] == "continue"
    assert client.get(f"/api/runs/{turn.run_id}/turns/1/", headers=headers).status_code == 404
    assert client.get("/api/runs/999999/turns/", headers=headers).status_code == 404


def test_a_turn_of_a_run_id_past_64_bits_is_a_404(client, auditor):
    # SQLite cannot bind such a number for a foreign key: it was a 500 there.
    huge = 2**70
    for url in (f"/api/runs/{huge}/turns/0/", f"/api/runs/{huge}/turns/", f"/api/runs/{huge}/"):
        assert client.get(url, headers=bearer(auditor)).status_code == 404, url


def test_a_runs_detail_shows_a_bounded_number_of_turns(client, auditor):
    from runs.api import DETAIL_TURNS

    run = make_run()
    for index in range(DETAIL_TURNS + 3):
        make_turn(run=run, index=index)
    body = client.get(f"/api/runs/{run.pk}/", headers=bearer(auditor)).json()
    assert [t["index"] for t in body["turns"]] == list(range(3, DETAIL_TURNS + 3))


# ---- escalations, with the reviewers' rules ----------------------------------------------------


@pytest.fixture
def held_refund():
    """A real refund run held at its irreversible step, with its open escalation."""
    run = drive(start("refund_waits_for_approval"))
    assert run.status == RunStatus.WAITING
    return Escalation.objects.get(run=run, status=EscalationStatus.OPEN)


def test_a_reviewer_claims_and_approves_a_held_step_by_its_hash(client, reviewer, held_refund):
    headers = bearer(reviewer)
    base = f"/api/escalations/{held_refund.pk}/"
    detail = client.get(base, headers=headers).json()
    assert detail["claimed_by"] is None  # reading claims nothing
    [call] = detail["held_calls"]
    assert client.post(f"{base}claim/", headers=headers).json()["claimed_by"] == "reviewer"

    response = client.post(
        f"{base}resolve/",
        {"decision": "approve", "seen_hashes": {"0": call["action_hash"]}},
        content_type="application/json",
        headers=headers,
    )
    assert response.status_code == 200, response.content
    assert response.json()["verdict"]["approved_calls"] == [call["position"]]
    assert LabelledExample.objects.filter(verdict__escalation=held_refund).exists()


def test_approving_without_the_seen_hash_or_with_a_stale_one_is_refused(
    client, reviewer, held_refund
):
    headers = bearer(reviewer)
    url = f"/api/escalations/{held_refund.pk}/resolve/"
    blind = client.post(
        url, {"decision": "approve"}, content_type="application/json", headers=headers
    )
    assert blind.status_code == 400
    assert "seen_hashes" in blind.json()
    stale = client.post(
        url,
        {"decision": "approve", "seen_hashes": {"0": "0" * 64}},
        content_type="application/json",
        headers=headers,
    )
    assert stale.status_code == 400
    assert "changed since" in " ".join(stale.json()["seen_hashes"])
    assert not Verdict.objects.exists()


def test_every_bad_verdict_field_is_named_at_once(client, reviewer, held_refund):
    response = client.post(
        f"/api/escalations/{held_refund.pk}/resolve/",
        {
            "decision": "reject",
            "reason": "  ",
            "risk_labels": {"0": "catastrophic"},
            "approved_calls": [-1],
            "rerun": "maybe",
        },
        content_type="application/json",
        headers=bearer(reviewer),
    )
    assert response.status_code == 400
    assert {"risk_labels", "approved_calls", "rerun"} <= set(response.json())
    response = client.post(
        f"/api/escalations/{held_refund.pk}/resolve/",
        {"decision": "reject", "reason": " ", "rerun": True},
        content_type="application/json",
        headers=bearer(reviewer),
    )
    assert response.status_code == 400
    assert {"reason", "rerun"} <= set(response.json())
    assert _is_error_shape(response.json())


def test_an_item_someone_else_holds_cannot_be_claimed_or_decided(
    client, reviewer, other_reviewer, held_refund
):
    base = f"/api/escalations/{held_refund.pk}/"
    assert client.post(f"{base}claim/", headers=bearer(other_reviewer)).status_code == 200
    headers = bearer(reviewer)
    taken = client.post(f"{base}claim/", headers=headers)
    assert taken.status_code == 409
    assert "other_reviewer" in " ".join(taken.json()["detail"])
    refused = client.post(
        f"{base}resolve/",
        {"decision": "reject", "reason": "no"},
        content_type="application/json",
        headers=headers,
    )
    assert refused.status_code == 400
    assert "holds this escalation" in " ".join(refused.json()["detail"])


def test_a_second_verdict_is_a_409_and_the_first_stands(client, reviewer, held_refund):
    headers = bearer(reviewer)
    url = f"/api/escalations/{held_refund.pk}/resolve/"
    body = {"decision": "reject", "reason": "wrong order"}
    assert (
        client.post(url, body, content_type="application/json", headers=headers).status_code == 200
    )
    again = client.post(url, body, content_type="application/json", headers=headers)
    assert again.status_code == 409
    assert _is_error_shape(again.json())
    assert Verdict.objects.count() == 1


def test_the_holder_extends_once_and_releases(client, reviewer, held_refund):
    headers = bearer(reviewer)
    base = f"/api/escalations/{held_refund.pk}/"
    assert client.post(f"{base}extend/", headers=headers).status_code == 400  # not held
    client.post(f"{base}claim/", headers=headers)
    extended = client.post(f"{base}extend/", headers=headers)
    assert extended.json()["deadline_extended"] is True
    twice = client.post(f"{base}extend/", headers=headers)
    assert "only once" in " ".join(twice.json()["detail"])
    released = client.post(
        f"{base}release/",
        {"skip": True, "reason": "later"},
        content_type="application/json",
        headers=headers,
    )
    assert released.json()["claimed_by"] is None


# ---- labelled examples -------------------------------------------------------------------------


def test_examples_are_listed_and_exported_as_json_lines(client, reviewer, held_refund):
    headers = bearer(reviewer)
    client.post(
        f"/api/escalations/{held_refund.pk}/resolve/",
        {"decision": "reject", "reason": "not this one"},
        content_type="application/json",
        headers=headers,
    )
    listed = client.get("/api/examples/?condition=risk", headers=headers).json()
    assert listed["count"] == 1
    assert listed["results"][0]["label"] in ("irreversible", "regulated")
    export = client.get("/api/examples/export/?condition=risk", headers=headers)
    assert export["Content-Type"] == "application/x-ndjson"
    lines = b"".join(export.streaming_content).decode().splitlines()
    assert [json.loads(line)["example_id"] for line in lines] == [
        listed["results"][0]["example_id"]
    ]
    bad = client.get("/api/examples/?condition=vibes&since=tomorrow", headers=headers)
    assert bad.status_code == 400
    assert {"condition", "since"} <= set(bad.json())


# ---- policy versions -----------------------------------------------------------------------------


def test_an_admin_creates_and_activates_a_policy_version(client, admin):
    current = demo_policy_version()
    headers = bearer(admin)
    body = {
        "label": "stricter",
        "question_set_version": current.question_set_version,
        "thresholds": current.thresholds,
        "question_set": current.question_set,
    }
    created = client.post(
        "/api/policy-versions/create/", body, content_type="application/json", headers=headers
    )
    assert created.status_code == 201, created.content
    assert created.json()["is_active"] is False
    version_id = created.json()["id"]
    activated = client.post(f"/api/policy-versions/{version_id}/activate/", headers=headers)
    assert activated.json()["is_active"] is True
    assert PolicyVersion.objects.get(is_active=True).pk == version_id


def test_an_invalid_policy_version_is_a_400_naming_its_fields(client, admin):
    before = list(PolicyVersion.objects.values_list("pk", flat=True))  # the shipped default
    response = client.post(
        "/api/policy-versions/create/",
        {
            "question_set_version": "q",
            "thresholds": {"integrity": {"c_stop": -1}},
            "question_set": {},
        },
        content_type="application/json",
        headers=bearer(admin),
    )
    assert response.status_code == 400
    assert "thresholds" in response.json()
    assert _is_error_shape(response.json())
    assert not PolicyVersion.objects.exclude(pk__in=before).exists()  # nothing stored


def test_a_missing_field_does_not_hide_the_content_problems_of_the_others(client, admin):
    response = client.post(
        "/api/policy-versions/create/",
        {"thresholds": {"integrity": {"c_stop": -1}}, "question_set": {"drift": ""}},
        content_type="application/json",
        headers=bearer(admin),
    )

    assert response.status_code == 400
    body = response.json()
    assert set(body) == {"question_set_version", "thresholds", "question_set"}
    assert any("integrity.c_stop" in message for message in body["thresholds"])


# ---- the index and the error shape ---------------------------------------------------------------


def test_the_index_lists_every_endpoint_at_a_path_that_resolves_to_it(client):
    body = client.get("/api/").json()
    assert len(body["endpoints"]) == len(API_ENDPOINTS)
    for endpoint in body["endpoints"]:
        path = endpoint["path"].replace("{id}", "1").replace("{index}", "0")
        path = path.replace("{step}", "0")
        assert resolve(path).view_name == f"api:{endpoint['name']}"


@pytest.mark.parametrize(
    ("persona", "method", "url"),
    [
        ("anonymous", "get", "/api/runs/"),
        ("auditor", "get", "/api/runs/999999/"),
        ("reviewer", "post", "/api/escalations/999999/claim/"),
        ("reviewer", "get", "/api/runs/?limit=0"),
    ],
)
def test_every_error_has_the_one_shape(request, client, persona, method, url):
    headers = {} if persona == "anonymous" else bearer(request.getfixturevalue(persona))
    response = getattr(client, method)(url, headers=headers)
    assert response.status_code >= 400
    assert _is_error_shape(response.json()), response.json()


def test_text_the_database_cannot_store_is_a_400_naming_the_field(client, reviewer, held_refund):
    raw = (
        '{"decision": "approve", "seen_hashes": {"0": "x"}, '
        '"edited_arguments": {"0": {"order_id": "ord\\u0000"}}, "answer": {"risk\\ud800": 1}}'
    )
    response = client.post(
        f"/api/escalations/{held_refund.pk}/resolve/",
        raw,
        content_type="application/json",
        headers=bearer(reviewer),
    )
    assert response.status_code == 400, response.content
    assert {"edited_arguments", "answer"} <= set(response.json())
    assert not Verdict.objects.exists()
