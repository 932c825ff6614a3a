"""Telling reviewers that an escalation arrived, or nears its deadline unclaimed: an email per
address and a Slack-compatible webhook POST, each delivery and attempt logged in
NotificationDelivery so that a retried or duplicated task never sends one twice."""

import hashlib
import logging
import smtplib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import httpx
from celery import current_app
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from escalations.models import (
    Escalation,
    EscalationEvent,
    EscalationEventKind,
    EscalationKind,
    EscalationStatus,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
)
from guardian_core.preferences import Preferences, preferences_of_address, speaking_as

logger = logging.getLogger(__name__)

PENDING, SENDING, SENT, FAILED = "pending", "sending", "sent", "failed"
# The task retries with backoff up to this many attempts per delivery; a duplicated task that
# comes later finds the budget spent and leaves the delivery failed.
MAX_ATTEMPTS = 7
# A worker that died between claiming a delivery and recording it leaves it "sending"; after
# this long another task may claim it again (the webhook may then get it twice, never more).
_STALE_CLAIM = timedelta(minutes=5)
_WEBHOOK_TIMEOUT_SECONDS = 10.0
# An arrival whose notice could not be enqueued (broker down) is picked up by the beat task
# after this long, and only this far back.
_ARRIVAL_GRACE = timedelta(minutes=2)
_ARRIVAL_LOOKBACK = timedelta(hours=1)
# The task that sends one notice (escalations/tasks.py), named rather than imported: the task
# calls this module, so importing it back would close a circle.
NOTIFY_TASK = "escalations.notify"
_PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
# The beat task handles at most this many escalations a minute; the rest wait for the next.
_BATCH = 200

# Characters that reorder what a reader sees (U+202E and kin): a plain-text email or a chat
# message cannot isolate them, so they are shown as their code point instead.
_BIDI_CONTROLS = {
    code: f"[U+{code:04X}]"
    for code in (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
}

# Marked, not translated here: the history's notes keep these words as written; a notice
# says them in the reader's language (notice_for).
_TITLES = {
    NotificationEvent.ARRIVED: gettext_noop("New escalation"),
    NotificationEvent.DEADLINE_NEAR: gettext_noop("Deadline near, unclaimed"),
}


class NotificationNotSent(RuntimeError):
    """A delivery failed in a way a later attempt may fix (network, 5xx, 429, SMTP)."""


@dataclass(frozen=True)
class Target:
    channel: str
    # What the delivery log stores: an email address, or the webhook's host and a digest of
    # its URL (a Slack webhook URL is a credential; it stays in the settings only).
    name: str
    address: str


@dataclass(frozen=True)
class Notice:
    subject: str
    text: str  # the email's plain-text body
    slack: dict  # {"text": ..., "blocks": [...]}


@dataclass
class NotifyOutcome:
    """What one escalation_notify call did; `retry` asks the task to try again later."""

    sent: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: str = ""
    retry: bool = False


@dataclass(frozen=True)
class _Attempt:
    ok: bool
    retry: bool = False
    status: int | None = None
    detail: str = ""


def notification_targets() -> list[Target]:
    """Where notices go, from GUARDIAN_NOTIFY_EMAILS and GUARDIAN_NOTIFY_WEBHOOK_URL."""
    targets = [
        Target(NotificationChannel.EMAIL, address[:500], address)
        for address in dict.fromkeys(settings.GUARDIAN_NOTIFY_EMAILS)
    ]
    url = settings.GUARDIAN_NOTIFY_WEBHOOK_URL
    if url:
        digest = hashlib.sha256(url.encode()).hexdigest()[:12]
        targets.append(
            Target(NotificationChannel.WEBHOOK, f"{urlsplit(url).netloc} #{digest}"[:500], url)
        )
    return targets


def escalation_notify_after_commit(
    escalation_id: int, event: str = NotificationEvent.ARRIVED
) -> None:
    """Enqueue the notice once the transaction that opened the escalation commits. Nothing is
    enqueued when no target is configured; a broker that refuses the task is logged, never
    raised into the turn that opened the escalation."""
    if notification_targets():
        transaction.on_commit(lambda: _enqueue(escalation_id, event))


def _enqueue(escalation_id: int, event: str) -> bool:
    try:
        # One quick publish retry for a blip, no more: a turn must not wait on a broker that is
        # down; the beat picks up an arrival whose notice never left (escalation_notify_due).
        # ignore_result as the task declares it: nobody waits for what it returns.
        current_app.send_task(
            NOTIFY_TASK,
            args=(escalation_id, str(event)),
            ignore_result=True,
            retry=True,
            retry_policy=_PUBLISH_RETRY,
        )
    except Exception:
        # Whatever the broker or its client raises, the escalation stands and the run waits
        # for a person; a lost notice is a logged nuisance, not a failed turn.
        logger.exception("could not enqueue the %s notice of escalation %s", event, escalation_id)
        return False
    return True


def escalation_notify(*, escalation_id: int, event: str) -> NotifyOutcome:
    """Send the `event` notice of an escalation to every configured target that has not had it.

    Idempotent: each (escalation, event, channel, target) is one NotificationDelivery row,
    claimed with a conditional update before sending, so a duplicated or retried task never
    sends a delivery that is already sent. No transaction is held while sending. An audit
    sample is never announced: it holds nothing, and waits its turn at the queue's end.
    """
    outcome = NotifyOutcome()
    if event not in NotificationEvent.values:
        raise ValueError(f"event: must be one of {', '.join(NotificationEvent.values)}")
    escalation = Escalation.objects.select_related("run").filter(pk=escalation_id).first()
    if escalation is None:
        outcome.skipped = "no such escalation"
        return outcome
    if escalation.kind == EscalationKind.AUDIT_SAMPLE:
        outcome.skipped = "an audit sample is not announced"
        return outcome
    now = timezone.now()
    if escalation.status != EscalationStatus.OPEN:
        outcome.skipped = f"escalation is {escalation.status}"
        return outcome
    if event == NotificationEvent.DEADLINE_NEAR and _held(escalation, now):
        outcome.skipped = "claimed since the warning was due"
        return outcome
    notices: dict[Preferences, Notice] = {}
    for target in notification_targets():
        delivery, busy = _claim(escalation, event, target, now)
        if busy:
            # Another task is sending it (or died doing so): look again later, when its claim
            # has either been recorded or gone stale.
            outcome.retry = True
        if delivery is None:
            continue
        reader = _reader(target)
        if reader not in notices:
            with speaking_as(reader):
                notices[reader] = notice_for(escalation, event)
        attempt = _send(notices[reader], target)
        _record(delivery, target, attempt)
        (outcome.sent if attempt.ok else outcome.failed).append(target.name)
        # The task's max_retries ends the retries; the delivery's attempts__lt=MAX_ATTEMPTS
        # keeps a duplicated task from adding more.
        if not attempt.ok and attempt.retry:
            outcome.retry = True
    return outcome


def escalation_notify_due(*, now: datetime | None = None) -> dict[str, list[int]]:
    """The beat's minute: mark and enqueue the deadline warnings now due, and re-enqueue
    arrivals whose notice never left. Returns the escalation ids per event.

    A warning is due when an open escalation's deadline is within
    GUARDIAN_DEADLINE_WARNING_MINUTES and nobody holds it (a lapsed claim counts as none); it
    is sent once per escalation (Escalation.deadline_warned_at), and unmarked again when the
    broker refuses it, so the next minute tries again.
    """
    if not notification_targets():
        return {}
    now = now or timezone.now()
    horizon = now + timedelta(minutes=settings.GUARDIAN_DEADLINE_WARNING_MINUTES)
    due = (
        Escalation.objects.raised()
        .filter(
            status=EscalationStatus.OPEN,
            deadline__gt=now,
            deadline__lte=horizon,
            deadline_warned_at__isnull=True,
        )
        .filter(Q(claimed_by__isnull=True) | Q(claim_expires_at__lte=now))
        .order_by("deadline", "id")
        .values_list("pk", flat=True)[:_BATCH]
    )
    warned = [
        pk
        for pk in due
        if Escalation.objects.filter(pk=pk, deadline_warned_at__isnull=True).update(
            deadline_warned_at=now
        )
    ]
    for pk in warned:
        transaction.on_commit(lambda pk=pk: _enqueue_warning(pk, now))
    # Only arrivals with no delivery row at all: one that was tried is the task's to retry.
    lost = list(
        Escalation.objects.raised()
        .filter(
            status=EscalationStatus.OPEN,
            created_at__gte=now - _ARRIVAL_LOOKBACK,
            created_at__lte=now - _ARRIVAL_GRACE,
        )
        .filter(
            ~Exists(
                NotificationDelivery.objects.filter(
                    escalation=OuterRef("pk"), event=NotificationEvent.ARRIVED
                )
            )
        )
        .order_by("id")
        .values_list("pk", flat=True)[:_BATCH]
    )
    for pk in lost:
        transaction.on_commit(lambda pk=pk: _enqueue(pk, NotificationEvent.ARRIVED))
    return {NotificationEvent.DEADLINE_NEAR: warned, NotificationEvent.ARRIVED: lost}


def notification_deliveries_sweep(*, now: datetime | None = None) -> dict[str, list[int]]:
    """Deliveries started and never finished (the sweeper, runs/sweeps.py): a row left
    "sending" (its worker died mid-send, or the task's message was lost after its claim) or
    "pending" (lost before it), untouched for _STALE_CLAIM. Each is marked failed with a line
    saying what happened, and its escalation's history says it too; while the escalation is
    open and attempts remain, its notice is enqueued again (the task claims the row anew and
    counts an attempt, so MAX_ATTEMPTS bounds the retries whoever sends them). Returns the
    delivery ids per outcome, "retried" and "failed".

    A failed row is never swept: the task's own retries (or their end) already said what
    became of it."""
    now = now or timezone.now()
    found = (
        NotificationDelivery.objects.filter(
            status__in=(PENDING, SENDING), updated_at__lt=now - _STALE_CLAIM
        )
        .select_related("escalation")
        .order_by("id")[:_BATCH]
    )
    swept: dict[str, list[int]] = {"retried": [], "failed": []}
    to_send: set[tuple[int, str]] = set()
    for delivery in found:
        escalation = delivery.escalation
        since = delivery.updated_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if delivery.status == SENDING:
            what = (
                f"attempt {delivery.attempts} started at {since} recorded no outcome"
                " (its worker died mid-send, or its message was lost)"
            )
        else:
            what = f"queued at {since} and never started (its message was lost)"
        if escalation.status != EscalationStatus.OPEN:
            retry, outcome = False, f"given up: the escalation is {escalation.status}"
        elif delivery.attempts >= MAX_ATTEMPTS:
            retry, outcome = False, f"given up: all {MAX_ATTEMPTS} attempts spent"
        else:
            retry = True
            outcome = f"sent again (attempt {delivery.attempts + 1} of {MAX_ATTEMPTS} at most)"
        line = f"swept at {now.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC: {what}; {outcome}"
        log = f"{delivery.error}\n{line}" if delivery.error else line
        with transaction.atomic():
            # On the state it was found in: a task that recorded an outcome meanwhile wins.
            if not NotificationDelivery.objects.filter(
                pk=delivery.pk, status=delivery.status, updated_at=delivery.updated_at
            ).update(status=FAILED, error=log[-4000:], updated_at=now):
                continue
            EscalationEvent.objects.create(
                escalation_id=escalation.pk,
                kind=EscalationEventKind.NOTIFY_RETRIED
                if retry
                else EscalationEventKind.NOTIFY_FAILED,
                note=f"{_TITLES[delivery.event]}: {delivery.channel} to {delivery.target}: "
                f"{what}; {outcome}"[:1000],
            )
        logger.warning(
            "notification %s of escalation %s via %s to %s: %s",
            delivery.event,
            escalation.pk,
            delivery.channel,
            delivery.target,
            line,
        )
        swept["retried" if retry else "failed"].append(delivery.pk)
        if retry:
            to_send.add((escalation.pk, delivery.event))
    # One task per notice: it sends to every target of it that has not had it.
    for escalation_id, event in sorted(to_send):
        transaction.on_commit(lambda pk=escalation_id, event=event: _enqueue(pk, event))
    return swept


def _enqueue_warning(escalation_id: int, warned_at: datetime) -> None:
    if not _enqueue(escalation_id, NotificationEvent.DEADLINE_NEAR):
        Escalation.objects.filter(pk=escalation_id, deadline_warned_at=warned_at).update(
            deadline_warned_at=None
        )


def _held(escalation: Escalation, now: datetime) -> bool:
    if escalation.claimed_by_id is None:
        return False
    return escalation.claim_expires_at is None or escalation.claim_expires_at > now


def _claim(
    escalation: Escalation, event: str, target: Target, now: datetime
) -> tuple[NotificationDelivery | None, bool]:
    """The delivery row claimed for one attempt by this task, or None (sent already, out of
    attempts, or claimed by another task); and whether another task holds a fresh claim."""
    delivery, _created = NotificationDelivery.objects.get_or_create(
        escalation=escalation, event=event, channel=target.channel, target=target.name
    )
    claimable = Q(status__in=(PENDING, FAILED)) | Q(
        status=SENDING, updated_at__lt=now - _STALE_CLAIM
    )
    claimed = (
        NotificationDelivery.objects.filter(pk=delivery.pk, attempts__lt=MAX_ATTEMPTS)
        .filter(claimable)
        .update(status=SENDING, attempts=F("attempts") + 1, updated_at=now)
    )
    delivery.refresh_from_db()
    if not claimed:
        return None, delivery.status == SENDING and delivery.attempts < MAX_ATTEMPTS
    return delivery, False


def _reader(target: Target) -> Preferences:
    # An address that is a person's gets the notice in their language and time zone; a shared
    # channel (the webhook, a list's address) in the server's.
    if target.channel == NotificationChannel.EMAIL:
        return preferences_of_address(target.address)
    return Preferences()


def _send(notice: Notice, target: Target) -> _Attempt:
    if target.channel == NotificationChannel.EMAIL:
        return _send_email(notice, target.address)
    return _post_webhook(notice, target.address)


def _send_email(notice: Notice, address: str) -> _Attempt:
    message = EmailMessage(
        subject=notice.subject,
        body=notice.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[address],
    )
    try:
        message.send()
    except (smtplib.SMTPException, OSError) as exc:
        return _Attempt(ok=False, retry=True, detail=f"{type(exc).__name__}: {exc}"[:300])
    return _Attempt(ok=True, detail="sent")


def _post_webhook(notice: Notice, url: str) -> _Attempt:
    try:
        response = httpx.post(url, json=notice.slack, timeout=_WEBHOOK_TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        return _Attempt(ok=False, retry=True, detail=f"{type(exc).__name__}: {exc}"[:300])
    status = response.status_code
    if response.is_success:
        return _Attempt(ok=True, status=status, detail=f"sent, HTTP {status}")
    # A server error or a rate limit may pass; a 4xx (bad URL, revoked hook) will not.
    retry = status >= 500 or status == 429
    return _Attempt(
        ok=False, retry=retry, status=status, detail=f"HTTP {status}: {response.text[:200]}"
    )


def _record(delivery: NotificationDelivery, target: Target, attempt: _Attempt) -> None:
    # This task holds the claim, so nobody else writes the row until it is released here.
    line = f"attempt {delivery.attempts} at {timezone.now():%Y-%m-%d %H:%M:%S%z}: {attempt.detail}"
    log = f"{delivery.error}\n{line}" if delivery.error else line
    status = SENT if attempt.ok else FAILED
    NotificationDelivery.objects.filter(pk=delivery.pk).update(
        status=status,
        response_status=attempt.status,
        error=log[-4000:],
        updated_at=timezone.now(),
    )
    log_level = logging.INFO if attempt.ok else logging.WARNING
    logger.log(
        log_level,
        "notification %s of escalation %s via %s to %s: %s",
        delivery.event,
        delivery.escalation_id,
        target.channel,
        target.name,
        line,
    )
    if attempt.ok:
        EscalationEvent.objects.create(
            escalation_id=delivery.escalation_id,
            kind=EscalationEventKind.NOTIFIED,
            note=f"{_TITLES[delivery.event]}: {target.channel} to {target.name}"
            f" (attempt {delivery.attempts})",
        )
    elif not attempt.retry or delivery.attempts >= MAX_ATTEMPTS:
        # The last word on this delivery: the reviewers' page says it never arrived, and why.
        EscalationEvent.objects.create(
            escalation_id=delivery.escalation_id,
            kind=EscalationEventKind.NOTIFY_FAILED,
            note=f"{_TITLES[delivery.event]}: {target.channel} to {target.name}"
            f" not delivered after {delivery.attempts} attempt{pluralize(delivery.attempts)}:"
            f" {attempt.detail}"[:1000],
        )


def item_url(escalation_id: int) -> str:
    """The absolute link to the escalation's page (GUARDIAN_BASE_URL)."""
    return settings.GUARDIAN_BASE_URL + reverse("escalations:detail", args=[escalation_id])


def notice_for(escalation: Escalation, event: str) -> Notice:
    """The email and the webhook message of one escalation's notice. The summary and the goal
    come from the run (a model or a caller wrote them): the email is plain text, the Slack
    text escapes &, < and > so they cannot form links or mentions."""
    title = _(_TITLES[NotificationEvent(event)])
    kind = str(escalation.get_kind_display())
    summary = _visible(escalation.summary)
    goal = _visible(escalation.run.goal)
    if len(goal) > 300:
        goal = goal[:299] + "…"
    deadline = timezone.localtime(escalation.deadline).strftime("%Y-%m-%d %H:%M %Z")
    link = item_url(escalation.pk)
    # One line: a header holds no line break (the summary's are folded into spaces).
    subject = _("[Guardian] %(title)s: #%(id)s %(kind)s — %(summary)s") % {
        "title": title,
        "id": escalation.pk,
        "kind": kind,
        "summary": " ".join(summary.split()),
    }
    text = "\n".join(
        [
            _("%(title)s: escalation #%(id)s (%(kind)s)")
            % {"title": title, "id": escalation.pk, "kind": kind},
            "",
            _("Why: %(summary)s") % {"summary": summary},
            _("Run %(run)s: %(goal)s") % {"run": escalation.run_id, "goal": goal},
            _("Deadline: %(deadline)s") % {"deadline": deadline},
            "",
            _("Open it: %(link)s") % {"link": link},
        ]
    )
    slack_title = f"{title}: #{escalation.pk} ({kind})"
    run_words = _("run %(run)s") % {"run": escalation.run_id}
    deadline_words = _("deadline %(deadline)s") % {"deadline": deadline}
    # Translators: the text of the link to the escalation in a chat message.
    open_words = _("open")
    fallback = (
        f"{_slack(slack_title)}: {_slack(summary)} · {run_words}"
        f" · {deadline_words} · <{link}|{open_words}>"
    )
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": slack_title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{kind}*\n{_slack(summary)}"}},
        {
            "type": "section",
            "fields": [
                {
                    "type": "mrkdwn",
                    "text": "*"
                    + _("Run %(run)s") % {"run": escalation.run_id}
                    + f"*\n{_slack(goal)}",
                },
                {"type": "mrkdwn", "text": "*" + _("Deadline") + f"*\n{deadline}"},
            ],
        },
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": _("Open the escalation")},
                    "url": link,
                }
            ],
        },
    ]
    return Notice(subject=subject[:200], text=text, slack={"text": fallback, "blocks": blocks})


def _visible(text: str) -> str:
    return text.translate(_BIDI_CONTROLS)


def _slack(text: str) -> str:
    """Slack's mrkdwn escaping: the only three characters it gives a meaning of their own."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
