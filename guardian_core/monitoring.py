"""Monitoring and agreement for admins: the guardian's probabilities and escalations per day,
distribution shift (PSI), agreement with reviewers (κ, confusion matrix), suggested t*."""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.conf import settings
from django.utils import timezone
from sklearn.metrics import cohen_kappa_score, confusion_matrix

from escalations.models import ExampleSource, LabelledExample
from guardian_core.engine.conditions import Condition, compared_probability, parse_answer
from guardian_core.engine.evaluation import is_positive
from guardian_core.models import PolicyVersion
from runs.models import Decision, DecisionOutcome

WINDOW_DAYS = 14
BINS = 10
# PSI above 0.2 is the usual "significant shift" rule of thumb.
PSI_THRESHOLD = 0.2
# Empty bins would make PSI infinite; a tiny floor keeps it finite and still large.
PSI_FLOOR = 1e-4
JUDGE_KEY = "judge"


def bin_of(p: float) -> int:
    return min(int(p * BINS), BINS - 1)


def psi(expected: Sequence[int], actual: Sequence[int]) -> float | None:
    """Population stability index of `actual` against `expected` (counts over the same bins);
    None when either side has no observations."""
    e_total, a_total = sum(expected), sum(actual)
    if not e_total or not a_total:
        return None
    total = 0.0
    for e, a in zip(expected, actual, strict=True):
        e_share = max(e / e_total, PSI_FLOOR)
        a_share = max(a / a_total, PSI_FLOOR)
        total += (a_share - e_share) * math.log(a_share / e_share)
    return total


@dataclass
class Day:
    day: date
    decisions: int = 0
    escalations: int = 0
    counts: dict[str, list[int]] = field(default_factory=dict)  # condition → per-bin counts

    @property
    def escalation_rate(self) -> float | None:
        return self.escalations / self.decisions if self.decisions else None


def daily(
    rows: Iterable[tuple[datetime, dict, str]], *, today: date, days: int = WINDOW_DAYS
) -> list[Day]:
    """One pass over (created_at, answers, outcome): per day, the decisions, escalations and
    each condition's histogram of compared probabilities (malformed answers are skipped)."""
    by_day = {today - timedelta(days=n): Day(today - timedelta(days=n)) for n in range(days)}
    for created_at, answers, outcome in rows:
        slot = by_day.get(timezone.localdate(created_at))
        if slot is None:
            continue
        slot.decisions += 1
        slot.escalations += outcome == DecisionOutcome.ESCALATE
        for condition in Condition:
            raw = (answers or {}).get(condition.value)
            p = compared_probability(condition, parse_answer(condition, raw))
            if p is None:
                continue
            counts = slot.counts.setdefault(condition.value, [0] * BINS)
            counts[bin_of(p)] += 1
    return [by_day[d] for d in sorted(by_day)]


def decision_days(*, now: datetime | None = None, days: int = WINDOW_DAYS) -> list[Day]:
    """The last `days` days of the decision log, read once and streamed (bounded window)."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    start = timezone.make_aware(
        datetime.combine(today - timedelta(days=days - 1), datetime.min.time())
    )
    rows = (
        Decision.objects.filter(created_at__gte=start, created_at__lte=now)
        .order_by()
        .values_list("created_at", "answers", "outcome")
        .iterator(chunk_size=2000)
    )
    return daily(rows, today=today, days=days)


def shift(days: list[Day], condition: str) -> float | None:
    """PSI of the last day against the 7 days before it, for one condition."""
    if len(days) < 2:
        return None
    last = days[-1].counts.get(condition, [0] * BINS)
    previous = [0] * BINS
    for day in days[-8:-1]:
        for i, n in enumerate(day.counts.get(condition, [0] * BINS)):
            previous[i] += n
    return psi(previous, last)


def banners(days: list[Day], *, capacity_per_hour: float | None = None) -> list[str]:
    """The warnings an admin should see: escalations beyond reviewer capacity (last day, per
    hour) and each condition whose distribution shifted beyond PSI_THRESHOLD."""
    capacity = (
        settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR
        if capacity_per_hour is None
        else capacity_per_hour
    )
    out = []
    if days:
        per_hour = days[-1].escalations / 24
        if per_hour > capacity:
            out.append(
                f"Escalations on {days[-1].day}: {per_hour:.2f} per hour, above the reviewers' "
                f"capacity of {capacity:g} per hour (GUARDIAN_REVIEWER_CAPACITY_PER_HOUR)."
            )
    for condition in Condition:
        value = shift(days, condition.value)
        if value is not None and value > PSI_THRESHOLD:
            out.append(
                f"{condition.value}: the probabilities shifted (PSI {value:.2f} of the last day "
                f"against the 7 before, above {PSI_THRESHOLD})."
            )
    return out


@dataclass(frozen=True)
class Agreement:
    n: int
    kappa: float | None
    matrix: list[list[int]]  # rows truth (negative, positive), columns prediction


def agreement(truth: Sequence[bool], predicted: Sequence[bool]) -> Agreement:
    if not truth:
        return Agreement(0, None, [[0, 0], [0, 0]])
    matrix = confusion_matrix(truth, predicted, labels=[False, True]).tolist()
    # κ is undefined when both raters use one and the same class only.
    if len(set(truth) | set(predicted)) < 2:
        return Agreement(len(truth), None, matrix)
    kappa = float(cohen_kappa_score(truth, predicted, labels=[False, True]))
    return Agreement(len(truth), None if math.isnan(kappa) else kappa, matrix)


def t_star(version: PolicyVersion | None, condition: str) -> float | None:
    thresholds = (version.thresholds or {}).get(condition) if version else None
    if not thresholds:
        return None
    if thresholds.get("t_star") is not None:
        return float(thresholds["t_star"])
    c_stop, c_cont = float(thresholds["c_stop"]), float(thresholds["c_cont"])
    return c_stop / (c_stop + c_cont) if c_stop + c_cont else None


def human_examples(condition: str) -> list[tuple[float, bool]]:
    """(probability, positive) of reviewers' labels that carry the guardian's probability."""
    return [(p, y) for p, y, _ in reviewer_rows(condition) if p is not None]


def reviewer_rows(condition: str) -> list[tuple[float | None, bool, float | None]]:
    """(guardian's probability, reviewer's label positive, judge's probability) per reviewer's
    label: the judge's answer is read from the decision of the escalated turn, where
    runs/judging.py logs it under "judge" (None when the judge was not asked)."""
    cond = Condition(condition)
    rows = LabelledExample.objects.filter(condition=condition, source=ExampleSource.HUMAN)
    out = []
    for p, label, answers in rows.values_list(
        "probability", "label", "verdict__escalation__turn__decision__answers"
    ):
        entry = (answers or {}).get(JUDGE_KEY) if isinstance(answers, dict) else None
        judged = entry.get("answers") if isinstance(entry, dict) else None
        raw = judged.get(condition) if isinstance(judged, dict) else None
        judge_p = compared_probability(cond, parse_answer(cond, raw)) if raw is not None else None
        out.append((p, is_positive(cond, label), judge_p))
    return out


def guardian_vs_reviewers(condition: str, threshold: float) -> Agreement:
    pairs = human_examples(condition)
    return agreement([y for _, y in pairs], [p >= threshold for p, _ in pairs])


def judge_vs_reviewers(condition: str, threshold: float) -> Agreement:
    """The judge at the same t* against reviewers, where both answered the same turn."""
    rows = [(y, j) for _, y, j in reviewer_rows(condition) if j is not None]
    return agreement([y for y, _ in rows], [j >= threshold for _, j in rows])


def expected_cost(
    pairs: Sequence[tuple[float, bool]], threshold: float, c_stop: float, c_cont: float
) -> float:
    """Mean cost of acting at `threshold`: a missed positive costs c_stop (the run should have
    stopped), a false alarm costs c_cont (it should have continued)."""
    cost = sum(c_stop for p, y in pairs if y and p < threshold)
    cost += sum(c_cont for p, y in pairs if not y and p >= threshold)
    return cost / len(pairs) if pairs else 0.0


def suggested_t_star(
    pairs: Sequence[tuple[float, bool]], c_stop: float, c_cont: float
) -> tuple[float, float] | None:
    """The t* on a 0.01 grid with the least expected cost on the labelled pairs (the lowest
    such t* on ties, the cautious side), and that cost."""
    if not pairs:
        return None
    grid = [i / 100 for i in range(1, 100)]
    best = min(grid, key=lambda t: (round(expected_cost(pairs, t, c_stop, c_cont), 12), t))
    return best, expected_cost(pairs, best, c_stop, c_cont)
