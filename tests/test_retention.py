"""Retention (runs/retention.py), on PostgreSQL and on the embedded SQLite: finished runs past
their days archived, checked and purged through the one purge door without touching another
run's chain; labelled examples kept while a model version learnt from them or a run's seal
covers them; notification deliveries deleted once their escalation is closed; all 0 (the
default) touches nothing."""

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from escalations.models import Escalation, LabelledExample, NotificationDelivery
from escalations.verdicts import escalation_resolve
from runs.archives import archive_check_file
from runs.audit import run_chain_verify
from runs.models import Decision, Run, RunStatus
from runs.retention import examples_fed_to_models, retention_apply
from runs.tasks import apply_retention
from tests.factories import make_guardian_model_version
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _archive_dir(settings, tmp_path):
    settings.GUARDIAN_ARCHIVE_DIR = tmp_path / "archive"
    settings.GUARDIAN_RETAIN_RUNS_DAYS = 0
    settings.GUARDIAN_RETAIN_EXAMPLES_DAYS = 0
    settings.GUARDIAN_RETAIN_NOTIFICATIONS_DAYS = 0


def _resolved(reviewer) -> Run:
    """A run that waited for a reviewer, was approved (a labelled example sealed into its
    story) and finished."""
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get()
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")
    run = drive(run)
    assert run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED)
    return run


def _finished_days_ago(run: Run, days: int) -> None:
    # finished_at is no part of the seal (runs/chain.py): moving it leaves the chain intact.
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(days=days))


# ---- the retention pass ---------------------------------------------------------------------


def test_nothing_is_touched_while_every_retention_is_zero(reviewer):
    run = _resolved(reviewer)
    _finished_days_ago(run, 10_000)
    report = retention_apply(now=timezone.now() + timedelta(days=10_000))
    assert report.as_dict() == {
        "runs_archived": [],
        "runs_held_for_models": [],
        "runs_held_broken_chain": [],
        "examples_deleted": 0,
        "examples_kept_for_models": 0,
        "notifications_deleted": 0,
    }
    assert Run.objects.filter(pk=run.pk).exists()
    assert not django_settings.GUARDIAN_ARCHIVE_DIR.exists()


def test_a_finished_run_past_retention_is_archived_then_purged_and_the_others_stay_intact(
    reviewer, settings, capsys
):
    settings.GUARDIAN_RETAIN_RUNS_DAYS = 30
    a, b = _resolved(reviewer), _resolved(reviewer)
    c = drive(start("refund_waits_for_approval"))  # waiting: never purged, however old
    _finished_days_ago(a, 31)
    _finished_days_ago(b, 29)
    Run.objects.filter(pk=c.pk).update(created_at=timezone.now() - timedelta(days=90))
    a_head = run_chain_verify(a).head

    result = apply_retention()  # the beat task: no arguments, calls the service

    assert result["runs_archived"] == [a.pk]
    assert not Run.objects.filter(pk=a.pk).exists()
    assert not Decision.objects.filter(turn__run_id=a.pk).exists()
    assert not LabelledExample.objects.filter(verdict__escalation__run_id=a.pk).exists()
    assert set(Run.objects.values_list("pk", flat=True)) >= {b.pk, c.pk}
    call_command("verify_log", "--all")  # raises if any chain left is broken
    assert "every chain intact" in capsys.readouterr().out
    (path,) = django_settings.GUARDIAN_ARCHIVE_DIR.iterdir()
    assert path.name == f"run-{a.pk}-{a.uid}.json"
    report = archive_check_file(path)
    assert report.ok
    assert report.head == a_head

    # Idempotent: the next pass finds nothing more to do.
    assert apply_retention()["runs_archived"] == []
    assert len(list(django_settings.GUARDIAN_ARCHIVE_DIR.iterdir())) == 1


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_the_purge_is_recorded_in_the_purge_log_on_postgresql(reviewer, settings):
    settings.GUARDIAN_RETAIN_RUNS_DAYS = 1
    run = _resolved(reviewer)
    _finished_days_ago(run, 2)
    retention_apply()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reason, actor FROM guardian_purge_log WHERE reason LIKE 'retention:%%'"
        )
        rows = cursor.fetchall()
        cursor.execute(
            "SELECT count(*) FROM guardian_purge_rows WHERE table_name = 'runs_run' "
            "AND %s = ANY(ids)",
            [run.pk],
        )
        recorded = cursor.fetchone()[0]
    assert len(rows) == 1
    reason, actor = rows[0]
    assert f"run-{run.pk}-{run.uid}.json" in reason
    assert actor.startswith("retention")
    assert recorded == 1


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_the_app_role_applies_retention_only_through_the_purge_door(reviewer, settings):
    """As the app's own role (GUARDIAN_DB_APP_ROLE, which owns no table): a delete of the log
    outside the door is refused, and the retention pass, going through the door, works."""
    from django.db import DatabaseError, transaction

    from runs.db_roles import app_role_grant

    role = "guardian_app"  # made by .ci/services.sh, as for tests/test_db_app_role.py
    app_role_grant(connection, role)
    settings.GUARDIAN_RETAIN_RUNS_DAYS = 1
    settings.GUARDIAN_RETAIN_EXAMPLES_DAYS = 1
    run = _resolved(reviewer)
    _finished_days_ago(run, 2)
    loose = _loose_example()
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {role}")
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            LabelledExample.objects.filter(pk=loose.pk).delete()
        report = retention_apply(now=timezone.now() + timedelta(days=2))
        cursor.execute("RESET ROLE")
    assert report.archived[0][0] == run.pk
    assert report.examples_deleted == 1
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not LabelledExample.objects.filter(pk=loose.pk).exists()


def test_a_run_whose_example_fed_a_model_version_is_kept_while_that_version_exists(
    reviewer, settings
):
    settings.GUARDIAN_RETAIN_RUNS_DAYS = 1
    run = _resolved(reviewer)
    _finished_days_ago(run, 5)
    example = LabelledExample.objects.filter(verdict__escalation__run=run).first()
    assert example is not None
    version = make_guardian_model_version(example_ids=[example.pk])

    report = retention_apply()
    assert report.held_for_models == [run.pk]
    assert report.archived == []
    assert LabelledExample.objects.filter(pk=example.pk).exists()

    version.delete()
    assert retention_apply().as_dict()["runs_archived"] == [run.pk]
    assert not LabelledExample.objects.filter(pk=example.pk).exists()


def test_held_out_examples_count_as_fed():
    version = make_guardian_model_version(
        example_ids=[3, 1], figures={"integrity": {"held_out_ids": [7]}}
    )
    assert examples_fed_to_models() == {1, 3, 7}
    version.delete()
    assert examples_fed_to_models() == set()


def _loose_example(**fields) -> LabelledExample:
    """An example no run's seal covers (an import)."""
    return LabelledExample.objects.create(
        condition="integrity",
        projection={"text": "x"},
        label=True,
        source="import",
        question_set_version="q1",
        model_version="m1",
        **fields,
    )


def test_old_examples_go_but_those_a_model_learnt_from_or_a_run_seals(reviewer, settings):
    settings.GUARDIAN_RETAIN_EXAMPLES_DAYS = 10
    run = _resolved(reviewer)
    sealed = LabelledExample.objects.filter(verdict__escalation__run=run).first()
    old, fed = _loose_example(), _loose_example()
    make_guardian_model_version(example_ids=[fed.pk])
    middle = timezone.now()
    recent = _loose_example()

    report = retention_apply(now=middle + timedelta(days=10))

    assert report.examples_deleted == 1
    assert report.examples_kept_for_models == 1
    left = set(LabelledExample.objects.values_list("pk", flat=True))
    assert old.pk not in left
    assert {fed.pk, recent.pk, sealed.pk} <= left
    assert run_chain_verify(run).ok  # its sealed example stayed with it


def test_notification_deliveries_go_once_past_retention_and_closed(reviewer, settings):
    settings.GUARDIAN_RETAIN_NOTIFICATIONS_DAYS = 7
    closed = _resolved(reviewer).escalations.get()
    waiting = drive(start("refund_waits_for_approval")).escalations.get()
    assert waiting.status == "open"

    def deliver(escalation: Escalation, target: str) -> NotificationDelivery:
        return NotificationDelivery.objects.create(
            escalation=escalation, event="arrived", channel="webhook", target=target,
            status="sent",
        )  # fmt: skip

    gone, owed = deliver(closed, "a"), deliver(waiting, "a")
    middle = timezone.now()
    recent = deliver(closed, "b")

    report = retention_apply(now=middle + timedelta(days=7))

    assert report.notifications_deleted == 1
    left = set(NotificationDelivery.objects.values_list("pk", flat=True))
    assert left == {owed.pk, recent.pk}
    assert gone.pk not in left


def test_retention_is_in_beat_and_reads_its_settings_from_the_environment(tmp_path):
    from tests.processes import run_manage

    entry = django_settings.CELERY_BEAT_SCHEDULE["retention"]
    assert entry["task"] == apply_retention.name == "runs.apply_retention"
    result = run_manage(
        "shell",
        "-c",
        "from django.conf import settings as s; print(s.GUARDIAN_RETAIN_RUNS_DAYS, "
        "s.GUARDIAN_RETAIN_EXAMPLES_DAYS, s.GUARDIAN_RETAIN_NOTIFICATIONS_DAYS, "
        "s.GUARDIAN_ARCHIVE_DIR)",
        GUARDIAN_RETAIN_RUNS_DAYS="30",
        GUARDIAN_RETAIN_EXAMPLES_DAYS=None,
        GUARDIAN_RETAIN_NOTIFICATIONS_DAYS="7",
        GUARDIAN_ARCHIVE_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"30 0 7 {tmp_path.resolve()}"
    refused = run_manage("check", GUARDIAN_RETAIN_RUNS_DAYS="-1")
    assert refused.returncode != 0
    assert "GUARDIAN_RETAIN_RUNS_DAYS" in refused.stderr


def test_an_audit_samples_label_goes_past_retention_and_its_run_stays_intact(reviewer, settings):
    # An audit sample is no part of its run's story (runs/sealing.py stories): its label may
    # go alone; a verdict's label on a raised escalation may not (it is sealed).
    from tests.test_audit_samples import audit_items, reading_run

    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    settings.GUARDIAN_RETAIN_EXAMPLES_DAYS = 3
    run = drive(reading_run(turns=1))
    item = audit_items(run).first()
    (asked,) = item.reason["triggered"]
    escalation_resolve(
        escalation_id=item.pk,
        reviewer=reviewer,
        decision="answer",
        answer={asked["source"]: 3 if asked["source"] == "drift" else False},
    )
    label = LabelledExample.objects.get(verdict__escalation=item)

    report = retention_apply(now=timezone.now() + timedelta(days=3))

    assert report.examples_deleted >= 1
    assert not LabelledExample.objects.filter(pk=label.pk).exists()
    assert run_chain_verify(run).ok


def test_a_run_whose_chain_is_broken_is_neither_archived_nor_purged(reviewer, settings):
    from tests.factories import tamper

    settings.GUARDIAN_RETAIN_RUNS_DAYS = 1
    run = _resolved(reviewer)
    _finished_days_ago(run, 2)
    first = Decision.objects.filter(turn__run=run).order_by("turn__index").first()
    tamper("UPDATE runs_decision SET stop_reason = 'forged' WHERE id = %s", [first.pk])

    report = retention_apply()

    assert report.held_broken == [run.pk]
    assert report.archived == []
    assert Run.objects.filter(pk=run.pk).exists()
    assert not django_settings.GUARDIAN_ARCHIVE_DIR.exists()


def test_the_command_runs_one_pass_and_says_what_it_did(reviewer, settings, capsys):
    settings.GUARDIAN_RETAIN_RUNS_DAYS = 1
    run = _resolved(reviewer)
    _finished_days_ago(run, 2)
    call_command("apply_retention")
    out = capsys.readouterr().out
    assert f"run {run.pk} archived to " in out
    assert "1 run archived and purged" in out
    assert not Run.objects.filter(pk=run.pk).exists()
