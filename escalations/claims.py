"""Claims: who works on an escalation now; claim, renew, release, skip, extend the deadline."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import F, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from escalations.errors import EscalationError
from escalations.models import (
    Approval,
    Escalation,
    EscalationEvent,
    EscalationEventKind,
    EscalationKind,
    EscalationStatus,
)
from escalations.queue import (
    QUEUE_SORTS,
    QueueFilters,
    escalation_claim_holder,
    escalation_queue_queryset,
    unclaimed_q,
)

# A claim touches the escalation row only, never its run, so it cannot take part in the run
# -> escalation lock order of escalation_resolve (escalations/verdicts.py); each claim, release,
# skip and extension is a short transaction of its own that writes one EscalationEvent (the
# queue's stamp reads them).


@dataclass(frozen=True)
class Claim:
    """What came of asking for an escalation: "claimed" (the reviewer holds it now), "held"
    (someone else does, since `since`), "closed" (decided, expired or cancelled) or "empty"
    (nothing left to claim)."""

    status: str
    escalation: Escalation | None
    holder: AbstractBaseUser | None = None
    since: datetime | None = None


def escalation_claim_next(
    *, reviewer: AbstractBaseUser, filters: QueueFilters | None = None
) -> Claim:
    """Claim the first unclaimed open escalation in the order and filters the reviewer sees
    (the queue's default: irreversible steps first, then the nearest deadline), passing over
    the ones this reviewer skipped within the claim time. A reviewer who still holds an item
    gets that one back, its claim renewed: they move past it by deciding or skipping it, never
    by losing it to a stray key. Atomic: on PostgreSQL the row is locked with SKIP LOCKED, so
    twenty reviewers pressing "next" at once get twenty different items and nobody waits;
    elsewhere a conditional update claims it, and a lost race moves on to the next candidate."""
    _require_reviewer(reviewer)
    filters = filters or QueueFilters()
    now = timezone.now()
    held = (
        Escalation.objects.filter(
            status=EscalationStatus.OPEN, claimed_by=reviewer, claim_expires_at__gte=now
        )
        .order_by(*QUEUE_SORTS["urgent"])
        .values_list("pk", flat=True)
        .first()
    )
    if held is not None:
        claim = escalation_claim(escalation_id=held, reviewer=reviewer)
        if claim.status == "claimed":
            return claim
    candidates = _claimable(reviewer, filters, now)
    if connection.vendor == "postgresql":
        escalation = _claim_first_locked(candidates, reviewer, now)
    else:
        escalation = _claim_first_conditional(candidates, reviewer, now)
    if escalation is None:
        return Claim("empty", None)
    _release_held(reviewer, keep=escalation.pk, note="claimed another item")
    return Claim("claimed", escalation, reviewer, escalation.claimed_at)


def escalation_claim(*, escalation_id: int, reviewer: AbstractBaseUser) -> Claim:
    """Opening an escalation claims it, unless someone else holds it; opening one the reviewer
    holds renews their claim. Claiming it releases the item they held before. Raises
    Escalation.DoesNotExist for an unknown id."""
    _require_reviewer(reviewer)
    now = timezone.now()
    until = now + timedelta(minutes=settings.GUARDIAN_CLAIM_MINUTES)
    open_item = Escalation.objects.filter(pk=escalation_id, status=EscalationStatus.OPEN)
    for _attempt in range(3):
        with transaction.atomic():
            renewed = open_item.filter(claimed_by=reviewer, claim_expires_at__gte=now).update(
                claim_expires_at=until
            )
            claimed = (
                not renewed
                and open_item.filter(unclaimed_q(now)).update(
                    claimed_by=reviewer, claimed_at=now, claim_expires_at=until
                )
                > 0
            )
            if claimed:
                _event(escalation_id, EscalationEventKind.CLAIMED, reviewer)
        escalation = Escalation.objects.select_related("claimed_by").get(pk=escalation_id)
        if renewed or claimed:
            if claimed:
                _release_held(reviewer, keep=escalation_id, note="opened another item")
            return Claim("claimed", escalation, reviewer, escalation.claimed_at)
        if escalation.status != EscalationStatus.OPEN:
            return Claim("closed", escalation)
        holder = escalation_claim_holder(escalation, now=now)
        if holder is not None and holder.pk != reviewer.pk:
            return Claim("held", escalation, holder, escalation.claimed_at)
        # Released or lapsed between the two statements: ask again.
    raise AssertionError(f"escalation {escalation_id}: its claim kept changing")


def escalation_release(
    *, escalation_id: int, reviewer: AbstractBaseUser, note: str = "", skipped: bool = False
) -> None:
    """The reviewer lets go of an escalation they hold (a lapsed claim of theirs included, as
    long as nobody took it since). A skip is recorded even when they did not hold it: its
    reason is history, and "next" passes the item over for this reviewer a while."""
    kind = EscalationEventKind.SKIPPED if skipped else EscalationEventKind.RELEASED
    note = note.strip()[:2000]
    with transaction.atomic():
        released = _unclaim(escalation_id, reviewer)
        if released or (
            skipped
            and Escalation.objects.filter(pk=escalation_id, status=EscalationStatus.OPEN).exists()
        ):
            _event(escalation_id, kind, reviewer, note)


def escalation_release_all(*, reviewer: AbstractBaseUser) -> int:
    """Release every escalation the reviewer holds (on logout); returns how many."""
    return _release_held(reviewer, keep=None, note="signed out")


def escalation_extend_deadline(*, escalation_id: int, reviewer: AbstractBaseUser) -> Escalation:
    """Move an open escalation's deadline later by GUARDIAN_DEADLINE_EXTENSION_MINUTES: only
    its holder, only once, and never once the deadline has passed (the sweeper is about to
    resolve it to the safe side), and never for an audit sample (it holds nothing: nobody
    waits on its deadline). Raises EscalationError naming why not."""
    now = timezone.now()
    minutes = settings.GUARDIAN_DEADLINE_EXTENSION_MINUTES
    with transaction.atomic():
        extended = (
            Escalation.objects.filter(
                pk=escalation_id,
                status=EscalationStatus.OPEN,
                claimed_by=reviewer,
                claim_expires_at__gte=now,
                deadline_extended=False,
                deadline__gte=now,
            )
            .exclude(kind=EscalationKind.AUDIT_SAMPLE)
            .update(deadline=F("deadline") + timedelta(minutes=minutes), deadline_extended=True)
        )
        if extended:
            _event(escalation_id, EscalationEventKind.EXTENDED, reviewer, f"+{minutes} min")
    escalation = Escalation.objects.select_related("claimed_by").get(pk=escalation_id)
    if extended:
        return escalation
    if escalation.status != EscalationStatus.OPEN:
        raise EscalationError(
            _("escalation %(id)s is already %(status)s")
            % {"id": escalation_id, "status": escalation.status}
        )
    if escalation.kind == EscalationKind.AUDIT_SAMPLE:
        raise EscalationError(
            "deadline: " + _("an audit sample holds nothing, so there is no deadline to extend")
        )
    problems = []
    holder = escalation_claim_holder(escalation, now=now)
    if holder is None:
        problems.append(
            "claim: " + _("open the item first; only its holder may extend its deadline")
        )
    elif holder.pk != reviewer.pk:
        since = timezone.localtime(escalation.claimed_at).strftime("%H:%M %Z")
        problems.append(
            "claim: "
            + _("%(holder)s holds it since %(since)s; only they may extend it")
            % {"holder": holder, "since": since}
        )
    if escalation.deadline_extended:
        problems.append("deadline: " + _("already extended once; it can be extended only once"))
    if escalation.deadline < now:
        problems.append("deadline: " + _("it has passed; the item resolves to the safe side"))
    raise EscalationError(problems)


def _require_reviewer(reviewer: AbstractBaseUser) -> None:
    if not reviewer.has_perm("escalations.review_escalation"):
        raise EscalationError(
            "reviewer: " + _("%(reviewer)s may not review escalations") % {"reviewer": reviewer}
        )


def _claimable(reviewer, filters: QueueFilters, now: datetime) -> QuerySet[Escalation]:
    """Unclaimed open escalations under the filters, in their order, but those this reviewer
    skipped within the claim time: "next" after a skip must not hand the same item back."""
    # A handful of ids read once (escalation_event_skips), not a probe per candidate.
    skipped = EscalationEvent.objects.filter(
        actor=reviewer,
        kind=EscalationEventKind.SKIPPED,
        created_at__gte=now - timedelta(minutes=settings.GUARDIAN_CLAIM_MINUTES),
    ).values("escalation_id")
    approved_by_them = Approval.objects.filter(
        reviewer=reviewer, escalation__status=EscalationStatus.OPEN
    ).values("escalation_id")
    return (
        escalation_queue_queryset(
            filters=QueueFilters(
                kind=filters.kind, condition=filters.condition, tool=filters.tool, run=filters.run
            ),
            reviewer=reviewer,
            now=now,
        )
        .filter(unclaimed_q(now))
        .exclude(pk__in=skipped)
        # Under a quorum their approval is given: the item waits for someone else.
        .exclude(pk__in=approved_by_them)
        .order_by(*QUEUE_SORTS[filters.sort])
    )


def _claim_first_locked(candidates, reviewer, now: datetime) -> Escalation | None:
    with transaction.atomic():
        # SKIP LOCKED: a row another claimer is taking is passed over, not waited for; the
        # WHERE clause is checked again on the row as locked, so a claim that committed in
        # the meantime is never taken twice.
        escalation = candidates.select_for_update(skip_locked=True, of=("self",)).first()
        if escalation is None:
            return None
        _take(escalation, reviewer, now)
    return escalation


def _claim_first_conditional(candidates, reviewer, now: datetime) -> Escalation | None:
    """SQLite has no row locks: claim with a conditional update, and move on when another
    claimer got there first (each lost race means one fewer candidate)."""
    for _attempt in range(20):
        ids = list(candidates.values_list("pk", flat=True)[:10])
        if not ids:
            return None
        for pk in ids:
            with transaction.atomic():
                taken = _take_if_unclaimed(pk, reviewer, now)
            if taken is not None:
                return taken
    return None


def _take(escalation: Escalation, reviewer, now: datetime) -> None:
    until = now + timedelta(minutes=settings.GUARDIAN_CLAIM_MINUTES)
    Escalation.objects.filter(pk=escalation.pk).update(
        claimed_by=reviewer, claimed_at=now, claim_expires_at=until
    )
    escalation.claimed_by, escalation.claimed_at, escalation.claim_expires_at = (
        reviewer,
        now,
        until,
    )
    _event(escalation.pk, EscalationEventKind.CLAIMED, reviewer)


def _take_if_unclaimed(pk: int, reviewer, now: datetime) -> Escalation | None:
    until = now + timedelta(minutes=settings.GUARDIAN_CLAIM_MINUTES)
    taken = (
        Escalation.objects.filter(pk=pk, status=EscalationStatus.OPEN)
        .filter(unclaimed_q(now))
        .update(claimed_by=reviewer, claimed_at=now, claim_expires_at=until)
    )
    if not taken:
        return None
    _event(pk, EscalationEventKind.CLAIMED, reviewer)
    return Escalation.objects.get(pk=pk)


def _unclaim(escalation_id: int, reviewer) -> bool:
    return bool(
        Escalation.objects.filter(
            pk=escalation_id, status=EscalationStatus.OPEN, claimed_by=reviewer
        ).update(claimed_by=None, claimed_at=None, claim_expires_at=None)
    )


def _release_held(reviewer, *, keep: int | None, note: str) -> int:
    """Release the open escalations the reviewer holds but `keep`, one short transaction each
    (never while holding the row just claimed: two escalation rows are never locked at once)."""
    held = Escalation.objects.filter(status=EscalationStatus.OPEN, claimed_by=reviewer)
    if keep is not None:
        held = held.exclude(pk=keep)
    released = 0
    for pk in list(held.values_list("pk", flat=True)):
        with transaction.atomic():
            if _unclaim(pk, reviewer):
                _event(pk, EscalationEventKind.RELEASED, reviewer, note)
                released += 1
    return released


def _event(escalation_id: int, kind: str, actor, note: str = "") -> None:
    EscalationEvent.objects.create(escalation_id=escalation_id, kind=kind, actor=actor, note=note)
