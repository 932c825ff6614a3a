"""The state figures of /metrics, read from the database at scrape time (a Prometheus custom
collector): escalations open, claimed, overdue, decided; runs by status and stuck; the judge's
settle rate; delivery failures; queue depths, worker heartbeats and the last chain check.

Each figure is one aggregate query, bounded by an index or by the last hour: a scrape every
15 s costs the database a handful of small queries. Events (turns, guardian calls) are
counted where they happen instead (guardian_core/metrics.py).
"""

import logging
import time
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Min, Q, Sum
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from escalations.models import (
    Escalation,
    EscalationKind,
    EscalationStatus,
    NotificationDelivery,
    Verdict,
)
from guardian_core import metrics
from runs.judging import JUDGE_KEY
from runs.models import Decision, Run, RunStatus, WebhookDelivery

logger = logging.getLogger(__name__)

DECIDE_BUCKETS = (60, 300, 900, 1800, 3600, 4 * 3600, 8 * 3600, 24 * 3600, 72 * 3600)
HOUR = timedelta(hours=1)


class GuardianStateCollector:
    """The figures that are a state of the database, computed when Prometheus scrapes."""

    def collect(self) -> Iterator[object]:
        now = timezone.now()
        yield from _escalations(now)
        yield from _runs(now)
        yield from _judge(now)
        yield from _deliveries()
        yield from _outside_the_database(now)


def _escalations(now) -> Iterator[object]:
    open_ = Escalation.objects.filter(status=EscalationStatus.OPEN)
    by_kind = GaugeMetricFamily(
        "guardian_escalations_open", "Open escalations, by kind.", labels=["kind"]
    )
    counts = dict(open_.values_list("kind").annotate(n=Count("id")).values_list("kind", "n"))
    for kind in EscalationKind.values:
        by_kind.add_metric([kind], counts.get(kind, 0))
    yield by_kind

    live_claim = Q(claimed_by__isnull=False, claim_expires_at__gt=now)
    figures = open_.aggregate(
        oldest=Min("created_at"),
        claimed=Count("id", filter=live_claim),
        unclaimed=Count("id", filter=~live_claim),
        overdue=Count("id", filter=Q(deadline__lt=now)),
    )
    oldest = figures["oldest"]
    yield metrics.gauge(
        "guardian_escalation_oldest_open_age_seconds",
        "Age of the oldest open escalation (0 when none is open).",
        (now - oldest).total_seconds() if oldest else 0.0,
    )
    claims = GaugeMetricFamily(
        "guardian_escalations_open_claimed",
        "Open escalations a reviewer holds (claimed) or nobody does (unclaimed).",
        labels=["claimed"],
    )
    claims.add_metric(["true"], figures["claimed"])
    claims.add_metric(["false"], figures["unclaimed"])
    yield claims
    yield metrics.gauge(
        "guardian_escalations_open_past_deadline",
        "Open escalations whose deadline has passed (the sweeper resolves them to the safe side).",
        figures["overdue"],
    )
    yield metrics.gauge(
        "guardian_escalation_deadline_seconds",
        "An escalation's deadline after it arrives (GUARDIAN_ESCALATION_HOURS).",
        settings.GUARDIAN_ESCALATION_HOURS * 3600,
    )
    yield metrics.gauge(
        "guardian_escalations_expired",
        "Escalations that reached their deadline unanswered, ever.",
        Escalation.objects.filter(status=EscalationStatus.EXPIRED).count(),
    )

    hour_ago = now - HOUR
    yield metrics.gauge(
        "guardian_escalations_decided_last_hour",
        "Verdicts given in the last hour.",
        Verdict.objects.filter(created_at__gte=hour_ago).count(),
    )
    yield _time_to_decide()

    created = Escalation.objects.filter(created_at__gte=hour_ago)
    by_kind_hour = GaugeMetricFamily(
        "guardian_escalations_created_last_hour",
        "Escalations that arrived in the last hour, by kind (audit samples included).",
        labels=["kind"],
    )
    counts = dict(created.values_list("kind").annotate(n=Count("id")).values_list("kind", "n"))
    for kind in EscalationKind.values:
        by_kind_hour.add_metric([kind], counts.get(kind, 0))
    yield by_kind_hour
    by_condition = GaugeMetricFamily(
        "guardian_escalations_by_condition_last_hour",
        "Escalations the policy raised in the last hour, per condition that triggered them.",
        labels=["condition"],
    )
    per_condition: dict[str, int] = {}
    for wrapped in created.raised().values_list("conditions", flat=True):
        for condition in filter(None, wrapped.split(",")):
            per_condition[condition] = per_condition.get(condition, 0) + 1
    for condition, count in sorted(per_condition.items()):
        by_condition.add_metric([condition], count)
    yield by_condition
    yield metrics.gauge(
        "guardian_reviewer_capacity_per_hour",
        "Escalations per hour the reviewers can decide (GUARDIAN_REVIEWER_CAPACITY_PER_HOUR).",
        settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR,
    )


def _time_to_decide() -> HistogramMetricFamily:
    """From the claim (or arrival) to the verdict, over every decided escalation: one query."""
    buckets = {
        f"b{i}": Count("id", filter=Q(seconds_to_decide__lte=bound))
        for i, bound in enumerate(DECIDE_BUCKETS)
    }
    row = Verdict.objects.filter(seconds_to_decide__isnull=False).aggregate(
        total=Count("id"), seconds=Sum("seconds_to_decide"), **buckets
    )
    family = HistogramMetricFamily(
        "guardian_escalation_time_to_decide_seconds",
        "Time from an escalation's claim (or arrival) to its verdict, over decided escalations.",
    )
    family.add_metric(
        [],
        [(str(float(b)), row[f"b{i}"]) for i, b in enumerate(DECIDE_BUCKETS)]
        + [("+Inf", row["total"])],
        sum_value=row["seconds"] or 0.0,
    )
    return family


def _runs(now) -> Iterator[object]:
    by_status = GaugeMetricFamily("guardian_runs", "Runs, by status.", labels=["status"])
    counts = dict(
        Run.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n")
    )
    for status in RunStatus.values:
        by_status.add_metric([status], counts.get(status, 0))
    yield by_status
    stalled = now - timedelta(seconds=settings.GUARDIAN_STALLED_AFTER_SECONDS)
    yield metrics.gauge(
        "guardian_runs_stuck",
        "Running runs no worker holds (no lease, or an expired one) and nothing moved for "
        "GUARDIAN_STALLED_AFTER_SECONDS: the sweeper should enqueue them again.",
        Run.objects.filter(status=RunStatus.RUNNING, updated_at__lt=stalled)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .count(),
    )


def _judge(now) -> Iterator[object]:
    """Of the conditions the second-tier judge was asked in the last hour, how many it settled
    (runs/judging.py keeps both in the decision's answers)."""
    asked = settled = 0
    logged = Decision.objects.filter(
        created_at__gte=now - HOUR, answers__has_key=JUDGE_KEY
    ).values_list("answers", flat=True)
    for answers in logged.iterator(chunk_size=500):
        entry = answers.get(JUDGE_KEY) if isinstance(answers, dict) else None
        if not isinstance(entry, dict):
            continue
        asked += len(entry.get("answers") or {})
        settled += len(entry.get("settled") or [])
    yield metrics.gauge(
        "guardian_judge_asked_last_hour", "Conditions the judge was asked in the last hour.", asked
    )
    yield metrics.gauge(
        "guardian_judge_settled_last_hour",
        "Conditions the judge settled (answered confidently) in the last hour.",
        settled,
    )


def _deliveries() -> Iterator[object]:
    notifications = GaugeMetricFamily(
        "guardian_notification_deliveries_failed",
        "Reviewer notifications whose delivery failed, by channel.",
        labels=["channel"],
    )
    failed = dict(
        NotificationDelivery.objects.filter(status="failed")
        .values_list("channel")
        .annotate(n=Count("id"))
        .values_list("channel", "n")
    )
    for channel in NotificationDelivery.Channel.values:
        notifications.add_metric([channel], failed.get(channel, 0))
    yield notifications
    yield metrics.gauge(
        "guardian_webhook_deliveries_failed",
        "Verdicts to external runs' webhooks whose last attempt failed (not delivered).",
        WebhookDelivery.objects.filter(delivered_at__isnull=True).exclude(error="").count(),
    )


def _outside_the_database(now) -> Iterator[object]:
    """Queue depths, worker heartbeats, the last chain check: each figure is left out of the
    scrape, with a warning in the log, when its source does not answer (a scrape that fails
    as a whole would hide every other figure)."""
    # The queues (GUARDIAN_CELERY_QUEUES, where routing names them) and Celery's default.
    queues = list(
        dict.fromkeys(
            [
                *(getattr(settings, "GUARDIAN_CELERY_QUEUES", None) or []),
                getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None) or "celery",
            ]
        )
    )
    try:
        depths = metrics.broker_queue_depths(
            settings.CELERY_BROKER_URL, settings.CELERY_BROKER_TRANSPORT_OPTIONS, queues
        )
    except Exception as exc:
        logger.warning("metrics: the broker's queue depths cannot be read: %s", exc)
    else:
        family = GaugeMetricFamily(
            "guardian_celery_queue_depth", "Messages waiting in a Celery queue.", labels=["queue"]
        )
        for queue, depth in depths.items():
            family.add_metric([queue], depth)
        yield family
    try:
        beats = metrics.heartbeats(settings.VAR_DIR, settings.CELERY_BROKER_URL)
    except Exception as exc:
        logger.warning("metrics: the workers' heartbeats cannot be read: %s", exc)
    else:
        family = GaugeMetricFamily(
            "guardian_worker_heartbeat_age_seconds",
            "Seconds since each worker's last heartbeat.",
            labels=["worker"],
        )
        wall = time.time()
        for worker, at in sorted(beats.items()):
            family.add_metric([worker], max(0.0, wall - at))
        yield family
    last = metrics.chain_verify_last(settings.VAR_DIR)
    if last is not None:
        yield metrics.gauge(
            "guardian_chain_broken_runs",
            "Runs with a broken decision log at the last `verify_log --all`.",
            last.get("broken", 0),
        )
        yield metrics.gauge(
            "guardian_chain_verified_timestamp_seconds",
            "When the last `verify_log --all` ran (Unix time).",
            last.get("at", 0),
        )
