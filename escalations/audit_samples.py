"""Audit samples: a share of the turns the policy let through, drawn at random for a person to
label, so that some labels come from the traffic as it is (docs/DESIGN.md, "Priors are data").

A turn whose decision did not escalate (it went on, replanned or stopped) is drawn when
audit_draw(decision) < GUARDIAN_AUDIT_SAMPLE_SHARE. The draw is a SHA-256 of the decision's id
and its seal (content_hash, a MAC under the log's key): the same decision always draws the same
number, so a retried write cannot draw twice and anyone reading the log can recompute why a
turn was or was not drawn, while the actor, who does not hold the key, cannot tell which of
its steps will be. A drawn turn opens one escalation of kind `audit_sample` (at most one per
turn: a unique constraint) asking about ONE condition the guardian answered on it, picked by
the same digest among the answered ones; a reviewer answers it as an uncertain escalation's
question, and the verdict becomes a labelled example selected `audit_sample` with the
guardian's probability (escalations/examples.py).

An audit sample holds nothing: the run does not wait on it, it is not the run's open question
(models.one_open_escalation_per_run leaves it out), its verdict and its expiry never move the
run, it is not part of the run's sealed story (runs/sealing.stories), it is not announced to
reviewers, and it comes last in the queue's default order (urgency 2). Cancelling the run
cancels it with the rest.
"""

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction

from escalations.models import URGENCY_AUDIT, Escalation, EscalationKind
from guardian_core.engine.conditions import Condition, compared_probability, parse_answer
from guardian_core.policy_validation import escalation_hours
from runs.vocabulary import source_words

# Names what the digest is for, so it can never equal another use of the same inputs.
AUDIT_DRAW_LABEL = "guardian/audit-sample/v1"
# The outcomes of a turn no person was asked about.
NOT_ESCALATED = ("continue", "replan", "stop_success", "stop_failure")


def audit_draw(decision_id: int, content_hash: str) -> tuple[float, int]:
    """(a number in [0, 1) compared with the share, a number that picks the condition): the
    first and second 8 bytes of SHA-256(label, decision id, decision seal)."""
    digest = hashlib.sha256(f"{AUDIT_DRAW_LABEL}\n{decision_id}\n{content_hash}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64, int.from_bytes(digest[8:16], "big")


def answered_conditions(answers: Mapping) -> list[str]:
    """The conditions the guardian gave a usable answer for (a probability the policy could
    compare), in the engine's order; the judge's entry and malformed answers are not answers."""
    answered = []
    for condition in Condition:
        if condition.value in answers:
            answer = parse_answer(condition, answers[condition.value])
            if compared_probability(condition, answer) is not None:
                answered.append(condition.value)
    return answered


def audit_sample_open(
    *,
    run,
    turn,
    decision_id: int,
    content_hash: str,
    outcome: str,
    answers: Mapping,
    reasons: Sequence[Mapping],
    now: datetime,
    share: float | None = None,
) -> Escalation | None:
    """Draw the decided turn for audit and, when drawn, open its audit sample; None when the
    turn escalated, was not drawn, answered no condition, or was drawn already. `share` is
    GUARDIAN_AUDIT_SAMPLE_SHARE unless given. Writes one row, in a savepoint of the caller's
    transaction when there is one, so a turn drawn twice (a retry) changes nothing."""
    share = settings.GUARDIAN_AUDIT_SAMPLE_SHARE if share is None else share
    if outcome not in NOT_ESCALATED or share <= 0:
        return None
    value, pick = audit_draw(decision_id, content_hash)
    if value >= share:
        return None
    answered = answered_conditions(answers)
    if not answered:
        return None
    condition = answered[pick % len(answered)]
    probability = compared_probability(
        Condition(condition), parse_answer(Condition(condition), answers[condition])
    )
    # The turn's own reason for the condition (its band, t*, δ): the reviewer sees what the
    # guardian said and what the policy made of it.
    said = next((dict(r) for r in reasons if r.get("source") == condition), None) or {
        "source": condition,
        "band": "clear",
        "value": probability,
    }
    reason = {
        "triggered": [said],
        "held_calls": [],
        "ambiguous_calls": [],
        "audit": {
            "decision_id": decision_id,
            "draw": value,
            "share": share,
            "answered": answered,
            "probability": probability,
        },
    }
    summary = (
        f"Audit sample: {source_words(condition)}, the guardian's probability "
        f"{probability:.2f}; no person was asked"
    )
    try:
        with transaction.atomic():
            return Escalation.objects.create(
                run=run,
                turn=turn,
                kind=EscalationKind.AUDIT_SAMPLE,
                reason=reason,
                summary=summary[:300],
                urgency=URGENCY_AUDIT,
                conditions=f",{condition},",
                tools="",
                deadline=now + timedelta(hours=escalation_hours(run.policy_version.limits or {})),
            )
    except IntegrityError:
        return None  # drawn already: one audit sample per turn
