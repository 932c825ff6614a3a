"""The sweeper (beat, every 30 s; runs.tasks.sweep_stalled_runs): what no worker or request
will finish by itself. A running run that no worker holds is enqueued again, an escalation past
its deadline resolves to the safe side, an external step whose caller vanished with calls
started is escalated (runs/external.py), and a reviewers' notice whose sending stopped with no
outcome is sent again or given up (escalations/notifications.py). Each says on its page what
happened: the run page's last error, the escalation's history, the tool call's error.

It stands above the run kinds it sweeps: nothing below imports it.
"""

import logging
from datetime import UTC, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from escalations.models import (
    Escalation,
    EscalationEvent,
    EscalationEventKind,
    EscalationKind,
    EscalationStatus,
)
from escalations.notifications import notification_deliveries_sweep
from guardian_core.logs import log_context
from guardian_core.wakeups import escalation_settled_after_commit
from runs import sealing
from runs.external import external_steps_abandoned, webhook_deliveries_sweep
from runs.models import Run, RunStatus
from runs.queue import enqueue

logger = logging.getLogger(__name__)


def run_sweep_stalled(*, now=None) -> list[int]:
    """Enqueue again the runs marked running that no worker holds: a lease that expired (the
    worker died) or no lease and no change for a while (the task message was lost)."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.GUARDIAN_STALLED_AFTER_SECONDS)
    stalled = (
        Run.objects.filter(status=RunStatus.RUNNING)
        .exclude(actor="external")  # its loop is its caller's: nothing to enqueue
        .filter(
            Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True, updated_at__lt=stale)
        )
    )
    found = list(stalled.values_list("pk", "lease_expires_at", "last_error"))
    for run_id, lease_expires_at, last_error in found:
        with log_context(run_id=run_id):
            logger.info("run %s enqueued again by the sweeper", run_id)
            _note_swept(stalled, run_id, lease_expires_at, last_error, now)
            enqueue(run_id)
    _expire_escalations(now)
    external_steps_abandoned(now=now)
    notification_deliveries_sweep(now=now)
    webhook_deliveries_sweep(now=now)
    return [run_id for run_id, _, _ in found]


# The sweeper's line in a run's last error begins so: a later sweep replaces it, not adds one.
SWEPT_PREFIX = "Swept at "


def _note_swept(stalled, run_id: int, lease_expires_at, last_error: str, now) -> None:
    """Say on the run's page (its last error, cleared by the next recorded turn) why it was
    enqueued again. A worker's own error stays above the line; the row is written only if the
    run is still stalled and its error unchanged, so a worker's write in between wins."""
    at = now.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if lease_expires_at is not None:
        held = lease_expires_at.astimezone(UTC).strftime("%H:%M:%S UTC")
        why = f"the worker holding it stopped (its lease ran out at {held})"
    else:
        why = "no worker had taken it up (its task's message was lost, or no worker is running)"
    line = f"{SWEPT_PREFIX}{at}: {why}; enqueued again."
    kept = [part for part in last_error.split("\n") if part and not part.startswith(SWEPT_PREFIX)]
    stalled.filter(pk=run_id, last_error=last_error).update(
        last_error="\n".join([*kept, line])[-2000:]
    )


def _expire_escalations(now) -> None:
    """An escalation past its deadline resolves to the safe side: nothing runs, the run stops.
    An audit sample past its deadline only closes: it never held its run."""
    expired = list(
        Escalation.objects.filter(status=EscalationStatus.OPEN, deadline__lt=now).values_list(
            "pk", "run_id", "kind"
        )
    )
    for escalation_id, run_id, kind in expired:
        if kind == EscalationKind.AUDIT_SAMPLE:
            _expire_audit_sample(escalation_id, now)
            continue
        with transaction.atomic():
            Run.objects.select_for_update().filter(pk=run_id).first()  # run first: one order
            if Escalation.objects.filter(pk=escalation_id, status=EscalationStatus.OPEN).update(
                status=EscalationStatus.EXPIRED, resolved_at=now
            ):
                # The item's history says what became of it (and the queue's stamp moves).
                EscalationEvent.objects.create(
                    escalation_id=escalation_id,
                    kind=EscalationEventKind.EXPIRED,
                    note="deadline passed unanswered; nothing ran",
                )
                Run.objects.filter(pk=run_id, status=RunStatus.WAITING).update(
                    status=RunStatus.FAILED,
                    stop_reason="escalation_expired",
                    finished_at=now,
                    updated_at=now,
                )
                # The escalation's status is part of the seal even when the run had moved.
                sealing.run_reseal(run_id)
                # A caller held by the wait server hears of it now (guardian_core/wakeups.py).
                escalation_settled_after_commit(escalation_id)


def _expire_audit_sample(escalation_id: int, now) -> None:
    """Close an unanswered audit sample: no run is read, locked, moved or sealed (it is no part
    of the run's story, runs/sealing.stories)."""
    with transaction.atomic():
        if Escalation.objects.filter(pk=escalation_id, status=EscalationStatus.OPEN).update(
            status=EscalationStatus.EXPIRED, resolved_at=now
        ):
            EscalationEvent.objects.create(
                escalation_id=escalation_id,
                kind=EscalationEventKind.EXPIRED,
                note="deadline passed unanswered; no label (the run was never held)",
            )
