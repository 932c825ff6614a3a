"""Monitoring and agreement for admins: the guardian's probabilities and escalations per day,
distribution shift (PSI), agreement with reviewers and between two reviewers (κ, confusion
matrix), the t* and δ that minimise expected cost within the reviewers' capacity, and
correlated errors (whether the guardian misses where the actor is wrong) over ended runs."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from escalations.models import (
    PEOPLES_SOURCES,
    Approval,
    Escalation,
    EscalationEvent,
    EscalationEventKind,
    EscalationKind,
    LabelledExample,
    VerdictDecision,
)
from guardian_core.engine import correlated_errors as errors
from guardian_core.engine import evaluation
from guardian_core.engine.conditions import (
    Condition,
    RiskClass,
    compared_probability,
    parse_answer,
)
from guardian_core.engine.evaluation import is_positive
from guardian_core.engine.policy import ON_FIRE, Outcome
from guardian_core.engine.thresholds import Threshold
from guardian_core.models import PolicyVersion
from policies.models import MonitoringCursor, MonitoringDay
from runs.models import Decision, DecisionOutcome, Run, RunStatus, ToolCall

# numpy and scikit-learn load with the first function that needs them, not with the module:
# no web or worker process pays for them at start (`python -X importtime manage.py check`).
if TYPE_CHECKING:
    import numpy as np

WINDOW_DAYS = 14
BINS = 10
# PSI above 0.2 is the usual "significant shift" rule of thumb.
PSI_THRESHOLD = 0.2
# Empty bins would make PSI infinite; a tiny floor keeps it finite and still large.
PSI_FLOOR = 1e-4
JUDGE_KEY = "judge"
# Recent probabilities are kept per day as counts of the value rounded to 1e-4: bounded memory
# whatever the traffic, and a value with four decimals or fewer (every point of the grids
# below) is kept exactly, so the band test on it is the engine's own.
LIVE_SCALE = 10_000


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
    first_at: datetime | None = None  # the day's first decision
    escalations: int = 0
    counts: dict[str, list[int]] = field(default_factory=dict)  # condition → per-bin counts
    # condition → Counter of round(p · LIVE_SCALE): the suggestion's live escalation rate.
    fine: dict[str, Counter] = field(default_factory=dict)
    runs: int = 0  # runs that ended on the day
    # condition → {per-run Table: runs}: correlated errors over the runs that ended on the day.
    correlated: dict[str, dict[errors.Table, int]] = field(default_factory=dict)

    @property
    def escalation_rate(self) -> float | None:
        return self.escalations / self.decisions if self.decisions else None

    @property
    def escalation_percent(self) -> float | None:
        """The rate in percent: the unit of the chart's axis, which the table beside it shares."""
        rate = self.escalation_rate
        return None if rate is None else 100 * rate


def turn_probability(condition: Condition, answers: object, risk_answers: object) -> float | None:
    """The compared probability that decides a turn for `condition`; None when malformed or
    not asked. Risk is asked per proposed call and a step is held when any call is, so a
    turn's risk probability is its highest call's."""
    if condition == Condition.RISK:
        values = [
            compared_probability(condition, parse_answer(condition, raw))
            for raw in (risk_answers if isinstance(risk_answers, list) else [])
        ]
        values = [v for v in values if v is not None]
        return max(values) if values else None
    raw = answers.get(condition.value) if isinstance(answers, dict) else None
    return compared_probability(condition, parse_answer(condition, raw))


def _fold(slot: Day, answers: object, risk_answers: object, outcome: str) -> None:
    """One decision into its day: a decision, maybe an escalation, and each condition's turn
    probability (malformed or not asked: skipped)."""
    slot.decisions += 1
    slot.escalations += outcome == DecisionOutcome.ESCALATE
    for condition in Condition:
        p = turn_probability(condition, answers, risk_answers)
        if p is None:
            continue
        counts = slot.counts.setdefault(condition.value, [0] * BINS)
        counts[bin_of(p)] += 1
        slot.fine.setdefault(condition.value, Counter())[round(p * LIVE_SCALE)] += 1


# Decisions folded per transaction: a pass holds the cursor's lock for one batch at a time.
FOLD_BATCH = 5000
# A page folds at most this many before it reads (beat folds the rest every minute): a page
# view costs the same whatever backlog a stopped beat left.
PAGE_FOLD_LIMIT = FOLD_BATCH


def _merge(row: MonitoringDay, day: Day) -> None:
    if day.first_at is not None and (row.first_at is None or day.first_at < row.first_at):
        row.first_at = day.first_at
    row.decisions += day.decisions
    row.escalations += day.escalations
    for condition, counts in day.counts.items():
        old = row.counts.get(condition, [0] * BINS)
        row.counts[condition] = [a + b for a, b in zip(old, counts, strict=True)]
    for condition, fine in day.fine.items():
        merged = Counter({int(k): v for k, v in row.fine.get(condition, {}).items()})
        merged.update(fine)
        row.fine[condition] = {str(k): v for k, v in sorted(merged.items())}


def monitoring_catch_up(*, limit: int = FOLD_BATCH, now: datetime | None = None) -> int:
    """Fold up to `limit` decisions logged since the last pass into their MonitoringDay rows
    and move the cursor, in one transaction; returns how many were folded (0: caught up, or
    another pass holds the cursor).

    Only decisions at least GUARDIAN_MONITORING_SETTLE_SECONDS old are folded, and the pass
    stops at the first younger one: a decision still committing may hold a lower id than one
    already visible, and the cursor must never pass it."""
    now = now or timezone.now()
    settled = now - timedelta(seconds=settings.GUARDIAN_MONITORING_SETTLE_SECONDS)
    MonitoringCursor.objects.get_or_create(pk=1)
    with transaction.atomic():
        cursor = MonitoringCursor.objects.select_for_update(skip_locked=True).filter(pk=1).first()
        if cursor is None:
            return 0
        rows = []
        for row in (
            Decision.objects.filter(pk__gt=cursor.last_decision_id)
            .order_by("pk")
            .values_list("pk", "created_at", "answers", "risk_answers", "outcome")[:limit]
        ):
            if row[1] > settled:
                break
            rows.append(row)
        if not rows:
            return 0
        folded: dict[date, Day] = {}
        for _, created_at, answers, risk_answers, outcome in rows:
            local = timezone.localdate(created_at)
            day = folded.setdefault(local, Day(local))
            if day.first_at is None or created_at < day.first_at:
                day.first_at = created_at
            _fold(day, answers, risk_answers, outcome)
        for local, day in folded.items():
            row, _ = MonitoringDay.objects.select_for_update().get_or_create(day=local)
            _merge(row, day)
            row.save()
        cursor.last_decision_id = rows[-1][0]
        cursor.folded_at = now
        cursor.save(update_fields=["last_decision_id", "folded_at"])
    return len(rows)


# ---- correlated errors: runs folded once they have ended --------------------------------------

# Ended runs folded per transaction, and at most per page view (beat folds the rest).
RUN_FOLD_BATCH = 500
PAGE_RUN_FOLD_LIMIT = 100
ENDED = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


def run_tables(runs: Sequence[tuple[int, str, str]]) -> dict[int, dict[str, errors.Table]]:
    """Per ended run (id, status, stop_reason), per measured condition, its turns' table
    (engine/correlated_errors.py's definitions): the actor wrong or right on each turn from
    the people's verdicts on the run's escalations and from its ending, crossed with whether
    the guardian flagged the turn for the condition at the thresholds its decision logged.
    A turn with no well-formed probability for a condition, or unknown for the actor, counts
    for nothing. Two queries whatever the number of runs."""
    ids = [pk for pk, _, _ in runs]
    rejected: dict[int, list[int]] = {}
    approved: dict[int, list[int]] = {}
    for run_id, index, decision in Escalation.objects.filter(
        run_id__in=ids, verdict__isnull=False
    ).values_list("run_id", "turn__index", "verdict__decision"):
        if decision == VerdictDecision.REJECT:
            rejected.setdefault(run_id, []).append(index)
        elif decision == VerdictDecision.APPROVE:
            approved.setdefault(run_id, []).append(index)
    turns: dict[int, list[tuple]] = {}
    for run_id, index, answers, risk_answers, thresholds in Decision.objects.filter(
        turn__run_id__in=ids
    ).values_list("turn__run_id", "turn__index", "answers", "risk_answers", "thresholds"):
        turns.setdefault(run_id, []).append((index, answers, risk_answers, thresholds))
    out: dict[int, dict[str, errors.Table]] = {}
    for pk, status, stop_reason in runs:
        mine = turns.get(pk, [])
        outcomes = errors.turn_outcomes(
            [index for index, *_ in mine],
            rejected=rejected.get(pk, ()),
            approved=approved.get(pk, ()),
            ending=errors.actor_ending(status, stop_reason),
        )
        tables: dict[str, errors.Table] = {}
        for index, answers, risk_answers, thresholds in mine:
            outcome = outcomes[index]
            if outcome is None:
                continue
            for condition in errors.MEASURED:
                threshold = _logged_threshold(thresholds, condition)
                p = turn_probability(condition, answers, risk_answers)
                if threshold is None or p is None:
                    continue
                turn = errors.Table.of_turn(outcome, errors.flagged(p, threshold))
                tables[condition.value] = tables.get(condition.value, errors.Table()) + turn
        out[pk] = tables
    return out


def _logged_threshold(thresholds: object, condition: Condition) -> Threshold | None:
    """The condition's threshold as the decision logged it; None when it did not, or a value
    the engine would refuse."""
    costs = thresholds.get(condition.value) if isinstance(thresholds, dict) else None
    try:
        return Threshold(c_stop=costs["c_stop"], c_cont=costs["c_cont"], delta=costs["delta"])
    except (KeyError, TypeError, ValueError):
        return None


def correlated_catch_up(*, limit: int = RUN_FOLD_BATCH, now: datetime | None = None) -> int:
    """Fold up to `limit` runs that ended since the last pass, in (finished_at, id) order, into
    the MonitoringDay of the day they ended, and move the cursor, in one transaction; returns
    how many were folded (0: caught up, or another pass holds the cursor).

    A run is folded once it has ended at least GUARDIAN_MONITORING_SETTLE_SECONDS ago: an ended
    run gets no more verdicts, so its turns' tables are final when folded."""
    now = now or timezone.now()
    settled = now - timedelta(seconds=settings.GUARDIAN_MONITORING_SETTLE_SECONDS)
    MonitoringCursor.objects.get_or_create(pk=1)
    with transaction.atomic():
        cursor = MonitoringCursor.objects.select_for_update(skip_locked=True).filter(pk=1).first()
        if cursor is None:
            return 0
        ended = Run.objects.filter(
            status__in=ENDED, finished_at__isnull=False, finished_at__lte=settled
        )
        if cursor.last_run_finished_at is not None:
            after = cursor.last_run_finished_at
            ended = ended.filter(
                Q(finished_at__gt=after) | Q(finished_at=after, pk__gt=cursor.last_run_id)
            )
        runs = list(
            ended.order_by("finished_at", "pk").values_list(
                "pk", "finished_at", "status", "stop_reason"
            )[:limit]
        )
        if not runs:
            return 0
        tables = run_tables([(pk, status, reason) for pk, _, status, reason in runs])
        by_day: dict[date, tuple[int, dict[str, Counter]]] = {}
        for pk, finished_at, _, _ in runs:
            local = timezone.localdate(finished_at)
            count, per_condition = by_day.get(local, (0, {}))
            for condition, table in tables[pk].items():
                per_condition.setdefault(condition, Counter())[table.key()] += 1
            by_day[local] = (count + 1, per_condition)
        for local, (count, per_condition) in by_day.items():
            row, _ = MonitoringDay.objects.select_for_update().get_or_create(day=local)
            row.runs += count
            for condition, keys in per_condition.items():
                merged = Counter(row.correlated.get(condition, {}))
                merged.update(keys)
                row.correlated[condition] = dict(sorted(merged.items()))
            row.save(update_fields=["runs", "correlated"])
        cursor.last_run_finished_at, cursor.last_run_id = runs[-1][1], runs[-1][0]
        cursor.save(update_fields=["last_run_finished_at", "last_run_id"])
    return len(runs)


def correlated_figures(days: Sequence[Day]) -> list[tuple[str, errors.CorrelatedErrors]]:
    """Per measured condition, correlated errors over the runs that ended in `days`."""
    return [
        (
            condition.value,
            errors.correlated_errors(
                errors.merge(day.correlated.get(condition.value, {}) for day in days)
            ),
        )
        for condition in errors.MEASURED
    ]


def monitoring_folded_at() -> datetime | None:
    """When the decision log was last folded (the page says how fresh it is)."""
    return MonitoringCursor.objects.filter(pk=1).values_list("folded_at", flat=True).first()


def decision_days(*, now: datetime | None = None, days: int = WINDOW_DAYS) -> list[Day]:
    """The last `days` days of the decision log from their folded rows, after folding at most
    PAGE_FOLD_LIMIT newer decisions: at most `days` rows read, however busy the log is."""
    now = now or timezone.now()
    monitoring_catch_up(limit=PAGE_FOLD_LIMIT, now=now)
    correlated_catch_up(limit=PAGE_RUN_FOLD_LIMIT, now=now)
    today = timezone.localdate(now)
    by_day = {today - timedelta(days=n): Day(today - timedelta(days=n)) for n in range(days)}
    for row in MonitoringDay.objects.filter(day__in=list(by_day)):
        by_day[row.day] = Day(
            row.day,
            decisions=row.decisions,
            first_at=row.first_at,
            escalations=row.escalations,
            counts={c: list(v) for c, v in row.counts.items()},
            fine={c: Counter({int(k): n for k, n in v.items()}) for c, v in row.fine.items()},
            runs=row.runs,
            correlated={
                c: {errors.Table.from_key(k): n for k, n in v.items()}
                for c, v in row.correlated.items()
            },
        )
    return [by_day[d] for d in sorted(by_day)]


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


# Rates per hour are counted over at least five minutes: over less, one turn is a storm; over
# a whole hour, a young deployment's real rate reads as a raw count.
MIN_RATE_HOURS = 5 / 60


def _midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, datetime.min.time()))


def escalations_per_hour(day: Day, *, now: datetime) -> float:
    """The day's escalations per hour: over the hours from its first decision to the end of
    the day, or to `now` while it is today (at least MIN_RATE_HOURS)."""
    start = day.first_at or _midnight(day.day)
    end = min(now, _midnight(day.day) + timedelta(days=1))
    return day.escalations / max((end - start).total_seconds() / 3600, MIN_RATE_HOURS)


def banners(
    days: list[Day], *, capacity_per_hour: float | None = None, now: datetime | None = None
) -> list[str]:
    """The warnings an admin should see: the last day's escalations per hour beyond reviewer
    capacity, and each condition whose distribution shifted beyond PSI_THRESHOLD."""
    capacity = (
        settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR
        if capacity_per_hour is None
        else capacity_per_hour
    )
    now = now or timezone.now()
    out = []
    if days and days[-1].escalations:
        per_hour = escalations_per_hour(days[-1], now=now)
        if per_hour > capacity:
            out.append(
                _(
                    "Escalations on %(day)s: %(per_hour)s escalations per hour since its "
                    "first decision, above the reviewers' capacity of %(capacity)s per hour "
                    "(GUARDIAN_REVIEWER_CAPACITY_PER_HOUR). That counts every escalation of the "
                    "day, held irreversible calls included, which no δ changes; the bands "
                    "suggested below count each condition's own band only, over the whole "
                    "window: a band within capacity there does not bring this day under it."
                )
                % {
                    "day": days[-1].day,
                    "per_hour": f"{per_hour:.2f}",
                    "capacity": f"{capacity:g}",
                }
            )
    for condition in Condition:
        value = shift(days, condition.value)
        if value is not None and value > PSI_THRESHOLD:
            out.append(
                _(
                    "%(condition)s: the probabilities shifted (PSI %(value)s of the last day "
                    "against the 7 before, above %(threshold)s)."
                )
                % {
                    "condition": condition.value,
                    "value": f"{value:.2f}",
                    "threshold": PSI_THRESHOLD,
                }
            )
    return out


@dataclass(frozen=True)
class Agreement:
    n: int
    kappa: float | None
    matrix: list[list[int]]  # rows truth (in `labels` order), columns prediction
    labels: tuple = (False, True)

    @property
    def rows(self) -> list[tuple[object, list[int]]]:
        return list(zip(self.labels, self.matrix, strict=True))


def agreement(
    truth: Sequence[object], predicted: Sequence[object], labels: Sequence[object] = (False, True)
) -> Agreement:
    from sklearn.metrics import cohen_kappa_score, confusion_matrix

    labels = tuple(labels)
    if not truth:
        return Agreement(0, None, [[0] * len(labels) for _ in labels], labels)
    matrix = confusion_matrix(truth, predicted, labels=list(labels)).tolist()
    # κ is undefined when both raters use one and the same class only.
    if len(set(truth) | set(predicted)) < 2:
        return Agreement(len(truth), None, matrix, labels)
    kappa = float(cohen_kappa_score(truth, predicted, labels=list(labels)))
    return Agreement(len(truth), None if math.isnan(kappa) else kappa, matrix, labels)


def t_star(version: PolicyVersion | None, condition: str) -> float | None:
    thresholds = (version.thresholds or {}).get(condition) if version else None
    if not thresholds:
        return None
    if thresholds.get("t_star") is not None:
        return float(thresholds["t_star"])
    c_stop, c_cont = float(thresholds["c_stop"]), float(thresholds["c_cont"])
    return c_stop / (c_stop + c_cont) if c_stop + c_cont else None


# Agreement and the suggestions read the newest this many people's labels per condition: a
# page view reads a bounded number of rows however long reviewers have been labelling.
REVIEWER_ROWS = 5000


def reviewer_rows(
    condition: str, *, limit: int | None = None
) -> list[tuple[float | None, bool, float | None]]:
    """(guardian's probability, label positive, judge's probability) per label people gave
    (PEOPLES_SOURCES), the newest `limit` (REVIEWER_ROWS): the judge's answer is read from the
    decision of the escalated turn, where runs/judging.py logs it under "judge" (None when it
    was not asked)."""
    cond = Condition(condition)
    rows = LabelledExample.objects.filter(condition=condition, source__in=PEOPLES_SOURCES)
    out = []
    for p, label, answers in rows.order_by("-pk").values_list(
        "probability", "label", "verdict__escalation__turn__decision__answers"
    )[: limit or REVIEWER_ROWS]:
        entry = (answers or {}).get(JUDGE_KEY) if isinstance(answers, dict) else None
        judged = entry.get("answers") if isinstance(entry, dict) else None
        raw = judged.get(condition) if isinstance(judged, dict) else None
        judge_p = compared_probability(cond, parse_answer(cond, raw)) if raw is not None else None
        out.append((p, is_positive(cond, label), judge_p))
    return out


def human_examples(rows: Sequence[tuple]) -> list[tuple[float, bool]]:
    """(probability, positive) of the reviewer_rows that carry the guardian's probability."""
    return [(p, y) for p, y, _ in rows if p is not None]


def guardian_vs_reviewers(rows: Sequence[tuple], threshold: float) -> Agreement:
    """The guardian at `threshold` against reviewers, over reviewer_rows."""
    pairs = human_examples(rows)
    return agreement([y for _, y in pairs], [p >= threshold for p, _ in pairs])


def judge_vs_reviewers(rows: Sequence[tuple], threshold: float) -> Agreement:
    """The judge at the same t* against reviewers, where both answered the same turn."""
    judged = [(y, j) for _, y, j in rows if j is not None]
    return agreement([y for y, _ in judged], [j >= threshold for _, j in judged])


# ---- suggested thresholds -------------------------------------------------------------------

# The grids searched: t* from 0.01 to 0.99 and δ from 0 to 0.49, both in steps of 0.01 (the
# precision the page shows), keeping only bands inside (0, 1) as policy_validation requires.
GRID_STEPS = 100
DELTA_STEPS = 50
# Below this many people's labels (or this few of either class) the cheapest point of the
# grid is noise: one example moves t* across the whole gap to its neighbour.
MIN_LABELS = 30
MIN_PER_CLASS = 5


def review_cost(c_stop: float, c_cont: float) -> float:
    """What one review costs in the condition's own units: GUARDIAN_REVIEW_COST_SHARE of the
    cheaper of its two errors (engine.evaluation.review_cost, as the gate prices it)."""
    return evaluation.review_cost(c_stop, c_cont, settings.GUARDIAN_REVIEW_COST_SHARE)


def expected_cost(
    pairs: Sequence[tuple[float, bool]],
    threshold: Threshold,
    *,
    c_stop: float,
    c_cont: float,
    review: float,
) -> float:
    """Mean cost per labelled example of applying `threshold` as the policy does, priced as
    the gate and the evaluation page price it (engine.evaluation.policy_figures): a review
    for a probability in the band, c_stop for a false stop, c_cont for a miss."""
    import numpy as np

    if not pairs:
        return 0.0
    p = np.array([float(v) for v, _ in pairs])
    y = np.array([bool(v) for _, v in pairs])
    prices = Threshold(c_stop=c_stop, c_cont=c_cont, delta=0.0)
    share = review / min(c_stop, c_cont)
    figures = evaluation.policy_figures(
        Condition.INFEASIBLE, p, y, threshold, prices=prices, review_share=share
    )
    return figures["expected_cost"]


@dataclass(frozen=True)
class Traffic:
    """Recent turns: how many, over how many hours, and each condition's turn probabilities
    (distinct values and how many turns had each)."""

    decisions: int
    hours: float
    values: dict[str, np.ndarray]
    weights: dict[str, np.ndarray]

    @property
    def per_hour(self) -> float:
        return self.decisions / self.hours if self.hours else 0.0

    @property
    def minutes(self) -> int:
        return round(self.hours * 60)


def traffic(days: list[Day], *, now: datetime) -> Traffic:
    """The window's turns over the hours from its first decision to `now` (at least one), so
    that a young deployment is not averaged over hours it did not exist."""
    import numpy as np

    hours = 0.0
    first = next((day.first_at or _midnight(day.day) for day in days if day.decisions), None)
    if first is not None:
        hours = max((now - first).total_seconds() / 3600, MIN_RATE_HOURS)
    values, weights = {}, {}
    for condition in Condition:
        merged: Counter = Counter()
        for day in days:
            merged.update(day.fine.get(condition.value, {}))
        keys = sorted(merged)
        values[condition.value] = np.array(keys, dtype=float) / LIVE_SCALE
        weights[condition.value] = np.array([merged[k] for k in keys], dtype=float)
    return Traffic(sum(day.decisions for day in days), hours, values, weights)


@dataclass(frozen=True)
class Candidate:
    """One (t*, δ) as the policy would apply it: what it costs on the people's labels and
    what it would send to reviewers on recent traffic."""

    c_cont: str  # the C_cont that gives this t* with the version's C_stop (the draft's value)
    t_star: float
    delta: float
    cost: float  # expected cost per labelled example
    review_share: float  # share of the labelled examples inside the band
    escalation_rate: float | None  # share of recent turns it would escalate; None: no traffic
    per_hour: float | None  # those escalations per hour


@dataclass(frozen=True)
class Suggestion:
    condition: str
    labels: int = 0
    positives: int = 0
    review_cost: float | None = None
    current: Candidate | None = None
    # At the version's own t* (its costs): the cheapest δ within the reviewers' capacity,
    # and the cheapest δ regardless of it.
    best: Candidate | None = None
    unconstrained: Candidate | None = None
    # The cheapest (t*, δ) of the whole grid within capacity, at the version's costs: far from
    # the version's t*, it says the probabilities are off (recalibrate), not the costs.
    cheapest_t: Candidate | None = None
    problem: str = ""

    @property
    def rows(self) -> list[tuple[tuple[str, str], Candidate]]:
        """The page's table: the current band, the suggested one, the cheapest beyond
        capacity when capacity binds."""
        rows = [(("current", _("Current")), self.current)] if self.current else []
        if self.best is not None:
            rows.append((("suggested", _("Suggested")), self.best))
        if self.capacity_binds:
            rows.append((("unconstrained", _("Cheapest beyond capacity")), self.unconstrained))
        return rows

    @property
    def miscalibrated(self) -> bool:
        """Whether another t* would be clearly cheaper on the labels than the cost ratio's."""
        return (
            self.cheapest_t is not None
            and self.best is not None
            and abs(self.cheapest_t.t_star - self.best.t_star) > 0.02
            and self.cheapest_t.cost < self.best.cost * 0.9
        )

    @property
    def capacity_binds(self) -> bool:
        return (
            self.best is not None
            and self.unconstrained is not None
            and (self.unconstrained.t_star, self.unconstrained.delta)
            != (self.best.t_star, self.best.delta)
        )


def _within(distance: np.ndarray, deltas: np.ndarray, weights: np.ndarray | None = None):
    """Per δ, how many (or how much weight) of `distance` is ≤ δ: the engine's band test
    |p − t*| ≤ δ on the same floats, counted by one sort instead of one pass per δ."""
    import numpy as np

    order = np.argsort(distance, kind="stable")
    ranked = distance[order]
    cumulative = np.concatenate(
        ([0.0], np.cumsum(weights[order] if weights is not None else np.ones(len(ranked))))
    )
    return cumulative[np.searchsorted(ranked, deltas, side="right")]


def _candidates(
    condition: Condition,
    p: np.ndarray,
    y: np.ndarray,
    live: Traffic,
    *,
    c_stop: float,
    c_cont: float,
    c_cont_text: str,
    review: float,
    deltas: np.ndarray,
) -> list[Candidate]:
    """Every δ of `deltas` at the t* that (c_stop, c_cont_text) gives, priced with the
    version's own costs (c_stop, c_cont) whatever the draft's C_cont."""
    import numpy as np

    t = Threshold(c_stop=c_stop, c_cont=float(c_cont_text), delta=0.0).t_star
    distance = np.abs(p - t)
    above = p > t
    band = _within(distance, deltas)
    fired_negative = int((above & ~y).sum()) - _within(distance[above & ~y], deltas)
    clear_positive = int((~above & y).sum()) - _within(distance[~above & y], deltas)
    costs = (review * band + c_stop * fired_negative + c_cont * clear_positive) / len(p)

    values, weights = live.values[condition.value], live.weights[condition.value]
    live_distance, live_above = np.abs(values - t), values > t
    escalated = _within(live_distance[~live_above], deltas, weights[~live_above])
    if ON_FIRE[condition] == Outcome.ESCALATE:
        # Firing escalates too (integrity, risk): everything above the band reaches a person.
        escalated = escalated + weights[live_above].sum()
    else:
        escalated = escalated + _within(live_distance[live_above], deltas, weights[live_above])
    # No recent turn with this condition's probability: its load is unknown, not zero.
    seen = bool(weights.sum()) and live.hours > 0
    return [
        Candidate(
            c_cont=c_cont_text,
            t_star=t,
            delta=float(delta),
            cost=float(costs[k]),
            review_share=float(band[k] / len(p)),
            escalation_rate=float(escalated[k] / live.decisions) if seen else None,
            per_hour=float(escalated[k] / live.hours) if seen else None,
        )
        for k, delta in enumerate(deltas)
    ]


def suggest_thresholds(
    condition: str,
    pairs: Sequence[tuple[float, bool]],
    *,
    costs: dict | None,
    live: Traffic,
    capacity_per_hour: float,
) -> Suggestion:
    """The δ for the version's own t* (its cost ratio: the t* that calibrated probabilities
    make cheapest) with the least expected cost on people's labels among those whose
    escalations on recent traffic stay within `capacity_per_hour` (a condition with no recent
    probabilities is not held back: its load is unknown), ties to the narrower band; beside
    it the version's current δ priced the same way, and, as a diagnosis, the cheapest (t*, δ)
    of the whole grid: a t* far from the cost ratio's says the probabilities are off, which
    recalibration mends, not a change of the costs."""
    import numpy as np

    cond = Condition(condition)
    positives = sum(1 for _, y in pairs if y)
    base = Suggestion(condition, labels=len(pairs), positives=positives)
    if not costs:
        return replace(
            base, problem=_("No active version with costs for this condition to start from.")
        )
    c_stop, c_cont = float(costs["c_stop"]), float(costs["c_cont"])
    review = review_cost(c_stop, c_cont)
    if len(pairs) < MIN_LABELS or min(positives, len(pairs) - positives) < MIN_PER_CLASS:
        return replace(
            base,
            review_cost=review,
            problem=(
                _(
                    "Too few people's labels to suggest from: %(labels)s with a probability "
                    "(%(positives)s positive); a suggestion needs at least %(min_labels)s, with "
                    "at least %(min_per_class)s of each class."
                )
                % {
                    "labels": len(pairs),
                    "positives": positives,
                    "min_labels": MIN_LABELS,
                    "min_per_class": MIN_PER_CLASS,
                }
            ),
        )
    p = np.array([float(v) for v, _ in pairs])
    y = np.array([bool(v) for _, v in pairs])
    common = {"c_stop": c_stop, "c_cont": c_cont, "review": review}
    own = repr(c_cont)  # round-trips: the version's own t*
    [current] = _candidates(
        cond, p, y, live, c_cont_text=own, deltas=np.array([float(costs["delta"])]), **common
    )
    at_own_t = _candidates(
        cond, p, y, live, c_cont_text=own, deltas=_deltas_inside(current.t_star), **common
    )
    grid = []
    for i in range(1, GRID_STEPS):
        t = i / GRID_STEPS
        text = repr(c_stop * (1 - t) / t)
        grid += _candidates(cond, p, y, live, c_cont_text=text, deltas=_deltas_inside(t), **common)

    def key(c: Candidate) -> tuple:
        return (round(c.cost, 12), c.delta, c.t_star)

    def fits(c: Candidate) -> bool:
        return c.per_hour is None or c.per_hour <= capacity_per_hour

    within = [c for c in at_own_t if fits(c)]
    grid_within = [c for c in grid if fits(c)]
    return replace(
        base,
        review_cost=review,
        current=current,
        best=min(within, key=key) if within else None,
        unconstrained=min(at_own_t, key=key),
        cheapest_t=min(grid_within, key=key) if grid_within else None,
        problem=""
        if within
        else (
            _(
                "No δ at t* %(t_star)s keeps %(condition)s's escalations within "
                "%(capacity)s per hour on recent traffic."
            )
            % {
                "t_star": f"{current.t_star:.2f}",
                "condition": condition,
                "capacity": f"{capacity_per_hour:g}",
            }
        ),
    )


def _deltas_inside(t_star: float) -> np.ndarray:
    """The δ of the grid whose band t* ± δ lies inside (0, 1), as policy_validation requires."""
    import numpy as np

    return np.array(
        [
            j / GRID_STEPS
            for j in range(DELTA_STEPS)
            if t_star - j / GRID_STEPS > 0 and t_star + j / GRID_STEPS < 1
        ]
    )


# ---- reviewer vs reviewer -------------------------------------------------------------------

RISK_LABELS = tuple(risk.value for risk in RiskClass)
# services._await_second_approver appends the first approver's own classes to the event's note
# in this form; it is the one place they are kept (an Approval holds no class).
_GIVEN_MARK = "; risk classes given: "


@dataclass(frozen=True)
class ReviewerPair:
    """One held call under a quorum: the class each of its two approvers gave it (the class it
    was held at when they gave none, which they saw and let stand, as the labelled example
    counts it), and what the second one decided."""

    escalation_id: int
    position: int
    first: str
    second: str
    first_given: bool
    second_given: bool
    second_decision: str


def _given_classes(note: str) -> dict[int, str]:
    _, mark, given = note.rpartition(_GIVEN_MARK)
    found = {}
    for item in given.split(", ") if mark else []:
        position, _, label = item.removeprefix("call ").partition(": ")
        if position.isdigit() and label in RISK_LABELS:
            found[int(position)] = label
    return found


def reviewer_pairs() -> list[ReviewerPair]:
    """Every held call two reviewers labelled: a quorum's first approver (the latest
    approved_one event by someone other than the verdict's reviewer) and the verdict's
    reviewer. Three queries at any size."""
    events = (
        EscalationEvent.objects.filter(
            kind=EscalationEventKind.APPROVED_ONE,
            escalation__kind=EscalationKind.GATED_STEP,
            escalation__verdict__isnull=False,
        )
        .exclude(actor=None)
        .select_related("escalation__verdict")
        .order_by("escalation_id", "created_at", "id")
    )
    first: dict[int, EscalationEvent] = {}
    for event in events:
        if event.actor_id != event.escalation.verdict.reviewer_id:
            first[event.escalation_id] = event  # the latest one wins
    approved: dict[tuple[int, int], set[int]] = {}
    for escalation_id, reviewer_id, position in Approval.objects.filter(
        escalation_id__in=first
    ).values_list("escalation_id", "reviewer_id", "position"):
        approved.setdefault((escalation_id, reviewer_id), set()).add(position)
    turns = {e.escalation_id: e.escalation.turn_id for e in first.values()}
    held_at = {
        (turn_id, position): risk_class
        for turn_id, position, risk_class in ToolCall.objects.filter(
            turn_id__in=set(turns.values())
        ).values_list("turn_id", "position", "risk_class")
    }
    pairs = []
    for escalation_id, event in sorted(first.items()):
        verdict = event.escalation.verdict
        mine = _given_classes(event.note)
        theirs = {int(k): v for k, v in (verdict.risk_labels or {}).items() if k.isdigit()}
        for position in sorted(approved.get((escalation_id, event.actor_id), ())):
            shown = held_at.get((turns[escalation_id], position))
            if shown not in RISK_LABELS:
                continue
            pairs.append(
                ReviewerPair(
                    escalation_id=escalation_id,
                    position=position,
                    first=mine.get(position, shown),
                    second=theirs.get(position, shown),
                    first_given=position in mine,
                    second_given=position in theirs,
                    second_decision=verdict.decision,
                )
            )
    return pairs


def reviewer_vs_reviewer(pairs: Sequence[ReviewerPair]) -> Agreement:
    """κ and the confusion matrix over the four risk classes: rows the first approver,
    columns the second."""
    return agreement([p.first for p in pairs], [p.second for p in pairs], labels=RISK_LABELS)
