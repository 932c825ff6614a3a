"""The live prior of each condition: the share of positives in the traffic runs see now, read
from what an admin stated, from the audit sample people labelled, or from the guardian's own
scores on recent decisions (engine/priors.py holds the arithmetic)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from guardian_core.engine.conditions import Condition, compared_probability, parse_answer
from guardian_core.engine.priors import (
    PriorEstimate,
    prior_table,
    traffic_prior,
    traffic_share,
)

# Fewer labelled audit samples than this and the audit sample does not set the prior: at a few
# percent, 50 examples still leave an interval of about ±6 points; the report shows it.
MIN_AUDIT_EXAMPLES = 50
# Fewer scored decisions than this and the traffic does not set the prior.
MIN_TRAFFIC_ANSWERS = 200
# The traffic a live prior is read from: the last two weeks of decisions.
PRIOR_WINDOW_DAYS = 14
# The newest decisions read, at most: enough for a prior, bounded for a request.
MAX_TRAFFIC_ANSWERS = 5000


def stated_priors() -> dict[str, float]:
    """GUARDIAN_LIVE_PRIORS, {condition: prior}: an admin's statement of the traffic's share
    of positives, which wins over every estimate (checked when settings load)."""
    stated = getattr(settings, "GUARDIAN_LIVE_PRIORS", None) or {}
    try:
        return prior_table(dict(stated))
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"GUARDIAN_LIVE_PRIORS: {exc}") from None


def audit_counts(condition: Condition | str) -> tuple[int, int]:
    """(positives, n) of the audit sample people labelled for `condition`: turns drawn at
    random from those the policy let through (escalations/audit_samples.py)."""
    from escalations.examples import audit_sample_counts

    return audit_sample_counts(Condition(condition))


def escalated_counts(condition: Condition | str) -> tuple[int, int]:
    """(positives, n) of people's labels for `condition` on escalations the policy raised."""
    from escalations.models import PEOPLES_SOURCES, ExampleSelection, LabelledExample
    from guardian_core.engine.evaluation import is_positive

    condition = Condition(condition)
    labels = LabelledExample.objects.filter(
        condition=condition.value,
        source__in=PEOPLES_SOURCES,
        selection=ExampleSelection.ESCALATED,
    ).values_list("label", flat=True)
    positives = n = 0
    for label in labels.iterator(chunk_size=1000):
        try:
            positives += bool(is_positive(condition, label))
        except (TypeError, ValueError):
            continue
        n += 1
    return positives, n


def escalated_share(condition: Condition | str, *, days: int | None = None) -> float:
    """The share of the last `days` of turns that escalated with a question about
    `condition` (0.0 when no turn was decided): the part of the traffic the audit sample never
    draws from."""
    from escalations.models import Escalation, EscalationKind
    from runs.models import Decision

    condition = Condition(condition)
    since = timezone.now() - timedelta(days=_days(days))
    decided = Decision.objects.filter(created_at__gte=since).count()
    if not decided:
        return 0.0
    escalated = (
        Escalation.objects.filter(created_at__gte=since, conditions__contains=f",{condition},")
        .exclude(kind=EscalationKind.AUDIT_SAMPLE)
        .values("turn_id")
        .distinct()
        .count()
    )
    return min(1.0, escalated / decided)


def _days(days: int | None) -> int:
    return PRIOR_WINDOW_DAYS if days is None else days


def traffic_probabilities(
    condition: Condition | str, *, model_version: str, days: int | None = None
) -> list[float]:
    """The probabilities the policy compared for `condition` on the newest decisions answered
    by `model_version` in the last `days` (PRIOR_WINDOW_DAYS), at most
    MAX_TRAFFIC_ANSWERS of them; one per proposed call for risk."""
    from runs.judging import answers_split
    from runs.models import Decision

    condition = Condition(condition)
    since = timezone.now() - timedelta(days=_days(days))
    rows = (
        Decision.objects.filter(created_at__gte=since, guardian_model_version=model_version)
        .order_by("-created_at", "-pk")
        .values_list("answers", "risk_answers")
    )
    found: list[float] = []
    for answers, risk_answers in rows.iterator(chunk_size=500):
        if condition == Condition.RISK:
            raws = risk_answers or []
        else:
            guardian, _ = answers_split(answers or {})
            raws = [guardian[condition.value]] if condition.value in guardian else []
        for raw in raws:
            p = compared_probability(condition, parse_answer(condition, raw))
            if p is not None:
                found.append(p)
        if len(found) >= MAX_TRAFFIC_ANSWERS:
            break
    return found[:MAX_TRAFFIC_ANSWERS]


def live_prior(
    condition: Condition | str,
    *,
    stated: float | None = None,
    model_version: str | None = None,
    calibrated: Callable[[Sequence[float]], Sequence[float]] | None = None,
    fitted: float | None = None,
) -> PriorEstimate | None:
    """The best estimate of `condition`'s live prior, or None when nothing tells it:

    1. `stated` (a command's flag), else GUARDIAN_LIVE_PRIORS: an admin's word;
    2. the audit sample, once people labelled at least MIN_AUDIT_EXAMPLES of it, joined with
       the verdicts' labels on the escalated share of the traffic (engine traffic_share);
    3. with a map being fitted (`calibrated` turns `model_version`'s raw probabilities into
       ones calibrated at the `fitted` prior): EM over at least MIN_TRAFFIC_ANSWERS recent
       decisions answered by `model_version`.
    """
    condition = Condition(condition)
    if stated is None:
        stated = stated_priors().get(condition.value)
    if stated is not None:
        return PriorEstimate(value=stated, low=stated, high=stated, source="stated", n=0)
    positives, n = audit_counts(condition)
    if n >= MIN_AUDIT_EXAMPLES:
        # The audit sample reads the turns that went on; the escalated ones, labelled by the
        # verdicts on them, make up the rest of the traffic.
        escalated_positives, escalated_n = escalated_counts(condition)
        return traffic_share(
            positives,
            n,
            escalated_share=escalated_share(condition),
            escalated_positives=escalated_positives,
            escalated_n=escalated_n,
        )
    if calibrated is not None and model_version and fitted is not None:
        raw = traffic_probabilities(condition, model_version=model_version)
        if len(raw) >= MIN_TRAFFIC_ANSWERS:
            return traffic_prior(list(calibrated(raw)), fitted)
    return None


def live_priors(conditions: Sequence[str] | None = None) -> dict[str, PriorEstimate]:
    """live_prior of each condition (every one by default) that an admin stated or the audit
    sample tells, for the gate and the pages: without a map being fitted, the traffic's raw
    scores say nothing calibrated."""
    names = conditions if conditions is not None else [c.value for c in Condition]
    out = {}
    for name in names:
        estimate = live_prior(name)
        if estimate is not None:
            out[name] = estimate
    return out
