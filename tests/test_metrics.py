"""/metrics (docs/OPERATIONS.md, Metrics): off unless enabled, refused without the token or an
allowed address, and its figures equal to what the database holds; the turn and guardian
instruments; the worker's own export; the alert rules name only series the app exports."""

import socket
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import CommandError, call_command
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from escalations.models import EscalationKind, EscalationStatus, NotificationDelivery, Verdict
from guardian_core import metrics
from guardian_core.celery import app as celery_app
from guardian_core.engine.conditions import Malformed
from runs.models import Decision, Run, RunStatus, RunWebhook, WebhookDelivery
from tests.factories import make_escalation, make_run, make_turn, tamper
from tests.processes import start_worker, stop_worker
from tests.runs_helpers import drive, start

REPO = Path(__file__).resolve().parent.parent
TOKEN = "metrics-token-for-the-tests-0123456789"


@pytest.fixture
def metrics_on(settings):
    settings.GUARDIAN_METRICS_ENABLED = True
    settings.GUARDIAN_METRICS_TOKEN = TOKEN
    settings.GUARDIAN_METRICS_ALLOW = []
    return settings


def scrape(client) -> dict[str, dict[tuple, float]]:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.content[:500]
    return parsed(response.content.decode())


def parsed(text: str) -> dict[str, dict[tuple, float]]:
    """{sample name: {sorted label pairs: value}}."""
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples[name][tuple(sorted(labels.items()))]


# ---- access ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_metrics_is_a_404_unless_enabled(client, settings):
    settings.GUARDIAN_METRICS_ENABLED = False
    settings.GUARDIAN_METRICS_TOKEN = TOKEN
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 404


@pytest.mark.django_db
def test_metrics_refuses_a_scrape_without_the_token(client, metrics_on):
    assert client.get("/metrics").status_code == 403
    wrong = client.get("/metrics", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 403
    assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


@pytest.mark.django_db
def test_a_signed_in_persons_session_does_not_open_metrics(client, metrics_on, reviewer):
    client.force_login(reviewer)
    assert client.get("/metrics").status_code == 403


@pytest.mark.django_db
def test_metrics_enabled_with_neither_token_nor_allow_list_refuses_everyone(client, metrics_on):
    metrics_on.GUARDIAN_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", headers={"Authorization": "Bearer "}).status_code == 403


@pytest.mark.django_db
def test_metrics_answers_an_allowed_address_and_refuses_another(client, metrics_on):
    metrics_on.GUARDIAN_METRICS_TOKEN = ""
    metrics_on.GUARDIAN_METRICS_ALLOW = ["10.0.0.0/8", "192.168.1.7"]
    assert client.get("/metrics", REMOTE_ADDR="10.2.3.4").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.7").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.168.1.8").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


def _waiting_turn():
    return make_turn(run=make_run(status=RunStatus.WAITING))


# ---- the database's state --------------------------------------------------------------------


@pytest.mark.django_db
def test_open_escalations_by_kind_claims_and_deadlines_match_the_database(
    client, metrics_on, reviewer
):
    now = timezone.now()
    first = make_escalation(turn=_waiting_turn(), kind=EscalationKind.GATED_STEP)
    make_escalation(
        turn=_waiting_turn(),
        kind=EscalationKind.GATED_STEP,
        claimed_by=reviewer,
        claimed_at=now,
        claim_expires_at=now + timedelta(minutes=10),
        deadline=now - timedelta(minutes=1),
    )
    make_escalation(
        turn=_waiting_turn(), kind=EscalationKind.INTEGRITY, conditions=",integrity,drift,"
    )
    make_escalation(
        turn=_waiting_turn(),
        kind=EscalationKind.UNCERTAIN,
        status=EscalationStatus.EXPIRED,
        resolved_at=now,
    )
    # Ten minutes old: the oldest open one.
    type(first).objects.filter(pk=first.pk).update(created_at=now - timedelta(minutes=10))

    samples = scrape(client)

    assert value(samples, "guardian_escalations_open", kind="gated_step") == 2
    assert value(samples, "guardian_escalations_open", kind="integrity") == 1
    assert value(samples, "guardian_escalations_open", kind="uncertain") == 0
    assert value(samples, "guardian_escalations_open_claimed", claimed="true") == 1
    assert value(samples, "guardian_escalations_open_claimed", claimed="false") == 2
    assert value(samples, "guardian_escalations_open_past_deadline") == 1
    assert value(samples, "guardian_escalations_expired") == 1
    oldest = value(samples, "guardian_escalation_oldest_open_age_seconds")
    assert 600 <= oldest < 660
    assert value(samples, "guardian_escalations_created_last_hour", kind="gated_step") == 2
    assert value(samples, "guardian_escalations_by_condition_last_hour", condition="integrity") == 1
    assert value(samples, "guardian_escalations_by_condition_last_hour", condition="drift") == 1
    assert value(samples, "guardian_reviewer_capacity_per_hour") == (
        settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR
    )


@pytest.mark.django_db
def test_time_to_decide_is_a_histogram_over_the_verdicts(client, metrics_on, reviewer):
    for seconds in (30.0, 200.0, 5000.0):
        escalation = make_escalation(
            turn=_waiting_turn(), status=EscalationStatus.APPROVED, resolved_at=timezone.now()
        )
        Verdict.objects.create(
            escalation=escalation, decision="approve", reviewer=reviewer, seconds_to_decide=seconds
        )
    samples = scrape(client)
    name = "guardian_escalation_time_to_decide_seconds"
    assert value(samples, f"{name}_count") == 3
    assert value(samples, f"{name}_sum") == pytest.approx(5230.0)
    assert value(samples, f"{name}_bucket", le="60.0") == 1
    assert value(samples, f"{name}_bucket", le="300.0") == 2
    assert value(samples, f"{name}_bucket", le="3600.0") == 2
    assert value(samples, f"{name}_bucket", le="+Inf") == 3
    assert value(samples, "guardian_escalations_decided_last_hour") == 3


@pytest.mark.django_db
def test_runs_by_status_and_stuck_runs_match_the_database(client, metrics_on):
    now = timezone.now()
    make_run(status=RunStatus.SUCCEEDED)
    stuck = make_run(status=RunStatus.RUNNING)
    held = make_run(
        status=RunStatus.RUNNING, lease_token="x", lease_expires_at=now + timedelta(minutes=5)
    )
    expired = make_run(
        status=RunStatus.RUNNING, lease_token="y", lease_expires_at=now - timedelta(minutes=5)
    )
    long_ago = now - timedelta(seconds=settings.GUARDIAN_STALLED_AFTER_SECONDS + 60)
    Run.objects.filter(pk__in=[stuck.pk, held.pk, expired.pk]).update(updated_at=long_ago)
    make_run(status=RunStatus.RUNNING)  # just enqueued: not stuck yet

    samples = scrape(client)
    assert value(samples, "guardian_runs", status="running") == 4
    assert value(samples, "guardian_runs", status="succeeded") == 1
    assert value(samples, "guardian_runs", status="failed") == 0
    assert value(samples, "guardian_runs_stuck") == 2


@pytest.mark.django_db
def test_failed_notifications_and_webhook_deliveries_are_counted(client, metrics_on):
    escalation = make_escalation()
    NotificationDelivery.objects.create(
        escalation=escalation, event="arrived", channel="email", target="a@x", status="failed"
    )
    NotificationDelivery.objects.create(
        escalation=escalation, event="arrived", channel="webhook", target="http://x", status="sent"
    )
    hook = RunWebhook.objects.create(run=escalation.run, url="http://x/hook", secret="s" * 32)
    WebhookDelivery.objects.create(webhook=hook, escalation=escalation, attempts=3, error="timeout")
    other = make_escalation(turn=_waiting_turn())
    hook2 = RunWebhook.objects.create(run=other.run, url="http://x/hook", secret="s" * 32)
    WebhookDelivery.objects.create(
        webhook=hook2, escalation=other, attempts=1, delivered_at=timezone.now()
    )
    samples = scrape(client)
    assert value(samples, "guardian_notification_deliveries_failed", channel="email") == 1
    assert value(samples, "guardian_notification_deliveries_failed", channel="webhook") == 0
    assert value(samples, "guardian_webhook_deliveries_failed") == 1


@pytest.mark.django_db
def test_the_judge_settle_rate_reads_the_last_hours_decisions(client, metrics_on):
    turn = make_turn()
    from tests.factories import make_decision

    make_decision(
        turn=turn,
        answers={"judge": {"answers": {"integrity": 0.9, "drift": 0.5}, "settled": ["integrity"]}},
    )
    samples = scrape(client)
    assert value(samples, "guardian_judge_asked_last_hour") == 2
    assert value(samples, "guardian_judge_settled_last_hour") == 1


@pytest.mark.django_db(transaction=True)
def test_celery_queue_depth_counts_the_waiting_messages(client, metrics_on):
    with celery_app.connection_for_write() as broker:
        celery_app.control.purge(connection=broker)
    try:
        for _ in range(2):  # routed by the settings to the maintenance queue
            celery_app.send_task("runs.sweep_stalled_runs")
        samples = scrape(client)
        assert value(samples, "guardian_celery_queue_depth", queue="maintenance") == 2
        assert value(samples, "guardian_celery_queue_depth", queue="turns") == 0
    finally:
        with celery_app.connection_for_write() as broker:
            celery_app.control.purge(connection=broker)


@pytest.mark.django_db
def test_the_last_verify_log_result_is_a_gauge(client, metrics_on, tmp_path):
    metrics_on.VAR_DIR = tmp_path
    run = start("goal_reached")
    drive(run)
    call_command("verify_log", "--all")
    assert value(scrape(client), "guardian_chain_broken_runs") == 0

    tamper(
        "UPDATE runs_decision SET outcome = 'replan' WHERE id = %s",
        [Decision.objects.filter(turn__run=run).values_list("id", flat=True).first()],
    )
    before = _count("guardian_chain_verify_failures_total")
    with pytest.raises(CommandError, match="broken chain"):
        call_command("verify_log", "--all")
    samples = scrape(client)
    assert value(samples, "guardian_chain_broken_runs") == 1
    assert value(samples, "guardian_chain_verify_failures_total") == before + 1


# ---- the turn path's instruments -------------------------------------------------------------


def _count(name: str, **labels) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.django_db
def test_a_runs_turns_are_counted_in_the_turn_histogram_and_guardian_latency(client, metrics_on):
    turns_before = _count("guardian_turn_duration_seconds_count", kind="agent")
    run = start("goal_reached")
    drive(run)
    decided = Decision.objects.filter(turn__run=run).count()
    assert decided >= 2
    assert _count("guardian_turn_duration_seconds_count", kind="agent") == turns_before + decided
    samples = scrape(client)
    assert value(samples, "guardian_turn_duration_seconds_count", kind="agent") == (
        turns_before + decided
    )
    version = Decision.objects.filter(turn__run=run).values_list(
        "guardian_model_version", flat=True
    )[0]
    asked = value(
        samples,
        "guardian_model_call_duration_seconds_count",
        adapter="scripted",
        model_version=version,
        question="answers",
    )
    assert asked >= 1


@pytest.mark.django_db
def test_a_guardian_that_times_out_is_counted_as_a_timeout(metrics_on):
    before = _timeouts()
    drive(start("guardian_timeout"))
    assert _timeouts() >= before + 1


def _timeouts() -> float:
    return sum(v for labels, v in _failures().items() if dict(labels).get("reason") == "timeout")


def _failures() -> dict:
    from prometheus_client import REGISTRY

    out = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name == "guardian_model_call_failures_total":
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_failure_reasons_are_read_from_the_malformed_answers():
    reason = metrics.guardian_failure_reason
    assert reason([0.1, 0.2]) is None
    assert reason([Malformed("guardian timed out after 2 s")]) == "timeout"
    assert reason([Malformed("guardian error: ValueError: x")]) == "error"
    assert reason([Malformed("guardian failed: RuntimeError")]) == "error"
    assert reason([Malformed("not a number")]) == "malformed"


# ---- a real server and a real worker ---------------------------------------------------------


def _get(url: str, token: str | None = TOKEN) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:  # not listening yet
        return 0, ""


@pytest.mark.django_db(transaction=True)
def test_a_live_server_serves_metrics_to_the_token_only(live_server, metrics_on):
    run = make_run(status=RunStatus.FAILED)
    status, _ = _get(f"{live_server.url}/metrics", token=None)
    assert status == 403
    status, body = _get(f"{live_server.url}/metrics")
    assert status == 200
    samples = parsed(body)
    assert value(samples, "guardian_runs", status="failed") == 1
    assert Run.objects.filter(status=RunStatus.FAILED).get() == run
    assert any(name.startswith("guardian_http_requests") for name in samples)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_exports_its_turns_and_its_heartbeat(client, metrics_on):
    from tests.test_worker_runs import wait_for, worker_env

    with celery_app.connection_for_write() as broker:
        celery_app.control.purge(connection=broker)
    for worker_name in metrics.heartbeats(settings.VAR_DIR, settings.CELERY_BROKER_URL):
        metrics.heartbeat_remove(settings.VAR_DIR, settings.CELERY_BROKER_URL, worker_name)
    port = _free_port()
    worker = start_worker(
        **worker_env(
            GUARDIAN_WORKER_METRICS_PORT=str(port), GUARDIAN_WORKER_HEARTBEAT_SECONDS="0.5"
        )
    )
    try:
        wait_for(
            lambda: _get(f"http://127.0.0.1:{port}/metrics", token=None)[0] == 200,
            timeout=60,
            what="the worker's metrics endpoint",
        )
        run = start("goal_reached")
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status != RunStatus.RUNNING,
            timeout=60,
            what="the run to finish",
        )
        decided = Decision.objects.filter(turn__run=run).count()
        _, body = _get(f"http://127.0.0.1:{port}/metrics", token=None)
        worker_samples = parsed(body)
        assert value(worker_samples, "guardian_turn_duration_seconds_count", kind="agent") == (
            decided
        )
        time.sleep(1.0)
        web = scrape(client)
        ages = web["guardian_worker_heartbeat_age_seconds"]
        assert len(ages) == 1, ages
        assert next(iter(ages.values())) < 5
    finally:
        log = stop_worker(worker)
    assert "worker metrics on" in log
    # Shut down cleanly, it is forgotten: a scaled-down worker is not a silent one (unless
    # stop_worker had to kill it: a loaded machine, 20 s; then its heartbeat rightly stays).
    if worker.returncode != -9:
        assert scrape(client).get("guardian_worker_heartbeat_age_seconds", {}) == {}


# ---- the alert rules and the dashboard -------------------------------------------------------


def _exported_names() -> set[str]:
    """Every series name the app exports: the instruments' and the collector's families."""
    text = (REPO / "policies" / "metrics.py").read_text() + (
        REPO / "guardian_core" / "metrics.py"
    ).read_text()
    import re

    names = set(re.findall(r'"(guardian_[a-z_]+)"', text))
    expanded = set()
    for name in names:
        expanded |= {name, f"{name}_total", f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return expanded


def _series_in(expression: str) -> set[str]:
    import re

    return set(re.findall(r"\b(guardian_[a-z_]+)\b", expression))


def test_the_alert_rules_parse_and_name_only_exported_series():
    rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yml").read_text())
    exported = _exported_names()
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in alerts} >= {
        "GuardianEscalationPastDeadline",
        "GuardianModelFailing",
        "GuardianEscalationsAboveCapacity",
        "GuardianChainBroken",
    }
    for rule in alerts:
        named = _series_in(rule["expr"])
        assert named, rule["alert"]
        assert named <= exported, (rule["alert"], named - exported)


def test_the_dashboard_names_only_exported_series():
    import json

    dashboard = json.loads((REPO / "deploy" / "grafana" / "guardian-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 12
    exported = _exported_names()
    for expr in exprs:
        assert _series_in(expr) <= exported, expr
