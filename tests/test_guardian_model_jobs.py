"""An admin asks for a new guardian model version from the guardian models page: a job a worker
runs (recalibrate or retrain), claimed once, whose refusal or failure is said on the page; a job
whose worker died, or that runs or waits too long, is swept to failed with what happened."""

import io
from datetime import UTC, timedelta

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from demo.examples import demo_examples_ensure
from demo.setup import demo_policy_version
from guardian_core.models import GuardianModelVersion
from policies.learning import (
    NEVER_PICKED_UP,
    TOOK_TOO_LONG,
    WORKER_DIED,
    guardian_model_job_run,
    guardian_model_job_start,
    guardian_model_jobs_sweep,
)
from policies.models import GuardianModelJob
from policies.tasks import sweep_guardian_model_jobs
from tests.processes import start_worker, stop_worker
from tests.test_worker_runs import clean_queue, wait_for, worker_env

__all__ = ["clean_queue"]  # a fixture, used by name


@pytest.mark.django_db
def test_the_form_queues_a_job_for_a_worker_and_the_page_lists_it(
    client, admin, django_capture_on_commit_callbacks
):
    client.force_login(admin)
    with django_capture_on_commit_callbacks() as enqueued:
        response = client.post(
            reverse("policies:models"),
            {"kind": "recalibrate", "adapter": "local", "conditions": ["integrity"]},
        )
    assert response.status_code == 302
    job = GuardianModelJob.objects.get()
    assert (job.kind, job.adapter, job.conditions, job.status) == (
        "recalibrate",
        "local",
        ["integrity"],
        "queued",
    )
    assert job.created_by == admin
    assert len(enqueued) == 1  # the task is sent once the job is committed
    page = client.get(reverse("policies:models")).content.decode()
    assert f"Job {job.pk}: Recalibrate" in page
    assert (
        'hx-get="/policies/models/jobs?versions=0"' in page
    )  # it polls while the job is unfinished


@pytest.mark.django_db
def test_bad_input_names_every_field_and_queues_nothing(client, admin):
    client.force_login(admin)
    response = client.post(
        reverse("policies:models"),
        {"kind": "retrain", "adapter": "openai", "conditions": ["integrity", "luck"]},
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "Only the local guardian can be retrained here." in body
    assert "Unknown: luck." in body
    assert not GuardianModelJob.objects.exists()


@pytest.mark.django_db
def test_a_job_makes_the_version_once_and_a_duplicate_message_does_nothing(admin):
    demo_policy_version()
    demo_examples_ensure()
    job = guardian_model_job_start(
        kind="recalibrate", adapter="local", conditions=["integrity"], created_by=admin
    )

    assert guardian_model_job_run(job_id=job.pk) == "done"
    assert guardian_model_job_run(job_id=job.pk) == "skipped"

    job.refresh_from_db()
    version = GuardianModelVersion.objects.get()
    assert (job.status, job.version, job.error) == ("done", version, "")
    assert (version.kind, version.adapter, version.is_active) == ("recalibrated", "local", False)
    assert version.conditions == ["integrity"]
    assert version.created_by == admin


@pytest.mark.django_db
def test_a_refused_job_says_why_on_the_page_and_stops_the_polling(client, admin):
    job = guardian_model_job_start(kind="retrain", adapter="local", conditions=["drift"])
    assert guardian_model_job_run(job_id=job.pk) == "failed"  # no labelled examples at all
    job.refresh_from_db()
    assert job.error
    client.force_login(admin)
    partial = client.get(reverse("policies:model_jobs"), HTTP_HX_REQUEST="true")
    assert partial.status_code == 286  # htmx stops polling: nothing is unfinished
    assert escape(job.error.splitlines()[0]) in partial.content.decode()
    assert not GuardianModelVersion.objects.exists()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_the_job_the_page_queued(client, admin, clean_queue):
    demo_policy_version()
    demo_examples_ensure()
    client.force_login(admin)
    worker = start_worker(**worker_env())
    try:
        client.post(
            reverse("policies:models"),
            {"kind": "recalibrate", "adapter": "local", "conditions": ["integrity"]},
        )
        job = GuardianModelJob.objects.get()
        wait_for(
            lambda: GuardianModelJob.objects.get(pk=job.pk).status in ("done", "failed"),
            timeout=120,
            what="the job",
        )
    finally:
        log = stop_worker(worker)
    job.refresh_from_db()
    assert job.status == "done", (job.error, log)
    page = client.get(reverse("policies:models")).content.decode()
    assert f'href="{reverse("policies:model_detail", args=[job.version.pk])}"' in page


@pytest.mark.django_db
def test_a_poll_after_a_job_made_a_version_tells_the_versions_table_to_refresh(client, admin):
    from tests.factories import make_guardian_model_version

    before = make_guardian_model_version()
    job = guardian_model_job_start(kind="recalibrate", adapter="local", conditions=["integrity"])
    client.force_login(admin)
    page = client.get(reverse("policies:models")).content.decode()
    poll = reverse("policies:model_jobs") + f"?versions={before.pk}"
    assert f'hx-get="{poll}"' in page
    assert 'hx-trigger="guardian-model-versions-changed from:body"' in page
    assert f'hx-get="{reverse("policies:model_versions")}"' in page

    running = client.get(poll, HTTP_HX_REQUEST="true")
    assert running.status_code == 200
    assert "HX-Trigger" not in running  # nothing new yet: the table stays

    made = make_guardian_model_version()
    GuardianModelJob.objects.filter(pk=job.pk).update(status="done", version=made)
    finished = client.get(poll, HTTP_HX_REQUEST="true")
    assert finished.status_code == 286  # the polling stops ...
    assert (
        finished["HX-Trigger"] == "guardian-model-versions-changed"
    )  # ... and the table refreshes
    table = client.get(reverse("policies:model_versions"), HTTP_HX_REQUEST="true")
    assert f"version {made.number}" in table.content.decode()
    assert "<html" not in table.content.decode()


@pytest.mark.django_db
def test_retrain_then_recalibrate_is_one_job_and_the_map_sits_on_the_retrained_version(
    client, admin, django_capture_on_commit_callbacks
):
    demo_policy_version()
    demo_examples_ensure()
    client.force_login(admin)
    page = client.get(reverse("policies:models")).content.decode()
    assert 'value="retrain_recalibrate"' in page
    with django_capture_on_commit_callbacks():
        client.post(
            reverse("policies:models"),
            {"kind": "retrain_recalibrate", "adapter": "local", "conditions": ["integrity"]},
        )
    job = GuardianModelJob.objects.get()
    assert guardian_model_job_run(job_id=job.pk) == "done"
    job.refresh_from_db()
    top = job.version
    assert top.kind == "recalibrated"
    assert top.over is not None
    assert top.over.kind == "retrained"
    assert top.base_model_version == top.over.model_version
    assert top.model_version.endswith(f"/train-{top.over.number}/cal-{top.number}")
    assert (top.is_active, top.over.is_active) == (False, False)
    # The retrained version's held-out ECE carries its interval, as the map's does.
    assert "low" in top.over.figures["integrity"]["held_out_paired"]["figures"]["ece"]


@pytest.mark.django_db
def test_a_versions_page_offers_a_recalibration_on_top_of_it(
    client, admin, django_capture_on_commit_callbacks
):
    from tests.factories import make_guardian_model_version

    under = make_guardian_model_version(kind="retrained", calibration={})
    client.force_login(admin)
    page = client.get(reverse("policies:model_detail", args=[under.pk])).content.decode()
    assert f"Recalibrate on top of version {under.number}" in page
    assert f'name="over" value="{under.number}"' in page
    with django_capture_on_commit_callbacks():
        response = client.post(
            reverse("policies:models"),
            {"kind": "recalibrate", "adapter": "local", "over": str(under.number)},
        )
    assert response.status_code == 302
    job = GuardianModelJob.objects.get()
    assert (job.kind, job.over) == ("recalibrate", under)
    listed = client.get(reverse("policies:models")).content.decode()
    assert f"Job {job.pk}: Recalibrate (a map over an adapter&#x27;s answers) over Local" in listed
    assert f"version {under.number}" in listed


@pytest.mark.django_db
def test_a_version_to_stack_on_must_exist_be_the_adapters_and_go_with_a_recalibration(
    client, admin
):
    from tests.factories import make_guardian_model_version

    local = make_guardian_model_version()
    client.force_login(admin)
    cases = [
        ({"kind": "recalibrate", "adapter": "local", "over": "99999"}, "no guardian model version"),
        ({"kind": "recalibrate", "adapter": "http", "over": str(local.number)}, "not http"),
        (
            {"kind": "retrain", "adapter": "local", "over": str(local.number)},
            "Only a recalibration",
        ),
        ({"kind": "recalibrate", "adapter": "local", "over": "two"}, "Give a version number."),
    ]
    for fields, problem in cases:
        response = client.post(reverse("policies:models"), fields)
        assert response.status_code == 400, fields
        assert problem in response.content.decode(), fields
        assert 'href="#id_over"' in response.content.decode()
    assert not GuardianModelJob.objects.exists()


@pytest.mark.django_db
def test_train_local_guardian_recalibrate_makes_both_versions_from_the_command_line():
    demo_policy_version()
    demo_examples_ensure()
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "train_local_guardian",
        "--condition",
        "integrity",
        "--recalibrate",
        "--live-prior",
        "integrity=0.05",
        stdout=out,
        stderr=err,
    )
    retrained, top = GuardianModelVersion.objects.order_by("number")
    assert (retrained.kind, top.kind, top.over) == ("retrained", "recalibrated", retrained)
    assert f"retrained as version {retrained.number}" in err.getvalue()
    text = out.getvalue()
    assert f"Guardian model version {top.number}: {top.model_version}" in text
    assert "answers at the live prior 0.050 (95 %: 0.050–0.050; stated)" in text


def _running(job, *, started, heartbeat) -> None:
    GuardianModelJob.objects.filter(pk=job.pk).update(
        status="running", started_at=started, heartbeat_at=heartbeat
    )


@pytest.mark.django_db
def test_a_job_whose_worker_went_silent_is_swept_to_failed_and_the_page_says_so(client, admin):
    now = timezone.now()
    dead = guardian_model_job_start(kind="retrain", adapter="local", conditions=["integrity"])
    alive = guardian_model_job_start(kind="recalibrate", adapter="local")
    # Its worker's last beat was 3 minutes ago (4 beats of 30 s is 2 minutes of silence).
    _running(dead, started=now - timedelta(minutes=5), heartbeat=now - timedelta(minutes=3))
    _running(alive, started=now - timedelta(minutes=5), heartbeat=now - timedelta(seconds=20))

    assert sweep_guardian_model_jobs() == [dead.pk]  # the beat's task calls the sweeper

    dead.refresh_from_db()
    assert (dead.status, dead.version) == ("failed", None)
    since = (now - timedelta(minutes=3)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    assert dead.error == WORKER_DIED.format(since=since)
    assert dead.error.startswith("The worker stopped while it was making this version")
    assert GuardianModelJob.objects.get(pk=alive.pk).status == "running"
    assert guardian_model_jobs_sweep() == []  # swept once
    assert guardian_model_job_run(job_id=dead.pk) == "skipped"  # a late redelivery does nothing

    client.force_login(admin)
    page = client.get(reverse("policies:models")).content.decode()
    shown = page[page.index(f"Job {dead.pk}:") :]
    shown = shown[: shown.index("</li>")]
    assert "<strong>Failed</strong>" in shown
    assert escape(dead.error) in shown
    still = page[page.index(f"Job {alive.pk}:") :]
    assert "<strong>Running</strong>" in still[: still.index("</li>")]
    assert "last sign of life" in still[: still.index("</li>")]


@pytest.mark.django_db
def test_a_job_running_or_queued_past_the_timeout_is_failed_with_why(settings):
    settings.GUARDIAN_MODEL_JOB_TIMEOUT_MINUTES = 30
    now = timezone.now()
    # Each asks for other conditions: a job the same as an unfinished one is not queued.
    slow = guardian_model_job_start(kind="recalibrate", adapter="local", conditions=["integrity"])
    _running(slow, started=now - timedelta(minutes=31), heartbeat=now)  # alive, but too long
    waiting = guardian_model_job_start(kind="recalibrate", adapter="local", conditions=["risk"])
    fresh = guardian_model_job_start(kind="recalibrate", adapter="local")
    GuardianModelJob.objects.filter(pk=waiting.pk).update(created_at=now - timedelta(minutes=31))

    assert sorted(guardian_model_jobs_sweep(now=now)) == sorted([slow.pk, waiting.pk])

    slow.refresh_from_db()
    waiting.refresh_from_db()
    assert (slow.status, slow.error) == ("failed", TOOK_TOO_LONG.format(minutes=30))
    assert (waiting.status, waiting.error) == ("failed", NEVER_PICKED_UP.format(minutes=30))
    assert "is a worker running?" in waiting.error
    assert GuardianModelJob.objects.get(pk=fresh.pk).status == "queued"
    assert guardian_model_job_run(job_id=waiting.pk) == "skipped"  # a worker come too late


def test_the_sweeper_is_on_the_beat_schedule():
    from guardian_core.celery import app

    entry = django_settings.CELERY_BEAT_SCHEDULE["sweep-guardian-model-jobs"]
    assert entry["task"] == "policies.sweep_guardian_model_jobs"
    assert entry["task"] in app.tasks
    assert app.tasks[entry["task"]].run is sweep_guardian_model_jobs.run


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_job_whose_real_worker_is_killed_mid_job_is_swept_and_the_page_says_so(
    client, admin, clean_queue, settings
):
    settings.GUARDIAN_MODEL_JOB_HEARTBEAT_SECONDS = 1  # the sweeper's reading of silence
    demo_policy_version()
    demo_examples_ensure()
    worker = start_worker(**worker_env(GUARDIAN_MODEL_JOB_HEARTBEAT_SECONDS="1"))
    try:
        job = guardian_model_job_start(kind="retrain", adapter="local", created_by=admin)

        def beating() -> bool:
            job.refresh_from_db()
            return job.status == "running" and job.heartbeat_at > job.started_at

        # Killed while it fits, once its worker has beaten at least once.
        wait_for(beating, timeout=120, what="the worker to run the job", poll=0.05)
        worker.kill()
        worker.wait(timeout=20)
    finally:
        log = stop_worker(worker)
    job.refresh_from_db()
    assert job.status == "running", (job.status, job.error, log)  # nobody will finish it
    wait_for(lambda: guardian_model_jobs_sweep() == [job.pk], timeout=30, what="the sweep")

    job.refresh_from_db()
    assert (job.status, job.version) == ("failed", None)
    assert job.error.startswith("The worker stopped while it was making this version")
    assert not GuardianModelVersion.objects.exists()
    client.force_login(admin)
    partial = client.get(reverse("policies:model_jobs"), HTTP_HX_REQUEST="true")
    assert partial.status_code == 286  # nothing unfinished: the page stops polling
    assert "<strong>Failed</strong>" in partial.content.decode()
    assert escape(job.error) in partial.content.decode()
