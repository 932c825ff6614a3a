"""Correlated errors: per condition, whether the guardian misses where the actor is wrong more
often than where it is right (DESIGN.md's residual risk: guardian and actor failing on the same
inputs), with intervals that say whether a difference is beyond noise.

Pure: counts in, figures out; randomness (the bootstrap) comes in as a numpy Generator.

Definitions, in DESIGN.md's words, stated once:

- A **turn** of a **run** counts for a condition when its **decision** logged a well-formed
  probability for that condition (risk: the turn's highest call's, as monitoring reads it).
  The guardian **flagged** the turn for the condition when that probability is in the
  uncertain band or above it at the thresholds in force (`Threshold.band` is not CLEAR): the
  guardian did not let the turn continue unattended on that condition. It **missed** when
  the probability is below the band (`CLEAR`): it let the turn continue.
- The **actor was wrong** on turn T when a person rejected a step at T or after it: a verdict
  `reject` on an **escalation** of turn T or of a later turn of the same run (the steps that
  led to a rejected one were wrong too); or when the run ended failed or cancelled for a
  reason that is a judgement of the actor's work (`actor_ending`): a person's rejection or
  cancel, a budget or turn cap, an exact repeat, what a reviewer's answers stopped.
- The **actor was right** on turn T when it was not wrong and the run succeeded, or a person
  approved the escalation of turn T.
- Otherwise the turn is **unknown** and counts for nothing: a run still going, or one whose
  ending judged nobody's work (an expired escalation, repeated errors advancing it) or was the
  guardian's own stop (infeasible, stagnation, drift: labelling turns by the guardian's own
  firing would make it its own evidence). goal_reached is not measured at all: its firing
  *is* the run's success, not an alarm about the actor, so "missed where the actor was
  wrong" has no meaning for it.

A bias to keep in mind when reading the figures: people see the turns something escalated, so
a rejection mostly lands on a turn the guardian (or the gate) flagged, which leans the figures
towards "the guardian catches the actor's errors". The turns before a rejected one and the runs
that failed or were cancelled are labelled whatever the guardian did; an audit sample of
turns nothing escalated is the unbiased source.

Per condition the turns make a 2 × 2 table (actor wrong/right × guardian flagged/missed), and
the runs they came from are kept apart (a `Table` per run): turns of one run share its ending,
so they are not independent draws, and the intervals that compare resample runs, not turns.

Figures (`correlated_errors`): the miss rate on actor-wrong turns and the fire (flag) rate on
actor-right turns, each with a Wilson interval (over turns: it ignores the clustering, so it is
narrower than the truth when one run holds many turns); the difference of miss rates, wrong −
right (miss rate on right = 1 − fire rate on right), their ratio, and the phi coefficient
between "guardian missed" and "actor wrong", each with a percentile interval from a cluster
bootstrap over runs. phi and the difference share a sign: above 0 the guardian misses more
where the actor is wrong (their errors fall on the same turns: independence does not hold);
0 is independence; below 0 it flags the actor's wrong turns more than its right ones (it
catches the actor's errors rather than sharing them). phi(missed, wrong) = −phi(flagged, wrong).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from guardian_core.engine.conditions import Condition
from guardian_core.engine.thresholds import Band, Threshold

if TYPE_CHECKING:
    import numpy as np

# The conditions measured: every one whose firing is an alarm about the run (see above).
MEASURED: tuple[Condition, ...] = tuple(c for c in Condition if c != Condition.GOAL_REACHED)

# Run endings (Run.stop_reason) that are the guardian's own stop, or nobody's judgement: they
# label no turn. Every other failed or cancelled ending is a judgement of the actor's work.
GUARDIAN_STOPS = frozenset({"infeasible", "stagnation", "drift"})
NOBODYS_ENDINGS = frozenset({"escalation_expired", "advance_failed"})

# Below this many actor-wrong or actor-right turns, or actor-wrong turns from fewer runs than
# MIN_RUNS, a difference is read as "too few to tell" and every figure carries a caution.
MIN_TURNS = 30
MIN_RUNS = 5
RESAMPLES = 2000
CONFIDENCE = 0.95
# The page's intervals must not move between two views of the same counts: a fixed seed.
SEED = 25


class ActorOutcome(StrEnum):
    WRONG = "wrong"
    RIGHT = "right"


class Reading(StrEnum):
    TOO_FEW = "too_few"
    DEPENDENT = "dependent"  # misses more where the actor is wrong, beyond noise
    CATCHES = "catches"  # misses less where the actor is wrong, beyond noise
    NO_DIFFERENCE = "no_difference"


def actor_ending(status: str, stop_reason: str) -> ActorOutcome | None:
    """What a finished run's ending says of the actor's work: RIGHT when it succeeded, WRONG
    when it failed or was cancelled for a reason that judges the actor, None otherwise (still
    going, or ended by the guardian's own stop or by nobody's judgement)."""
    if status == "succeeded":
        return ActorOutcome.RIGHT
    if status in ("failed", "cancelled"):
        if stop_reason in GUARDIAN_STOPS or stop_reason in NOBODYS_ENDINGS:
            return None
        return ActorOutcome.WRONG
    return None


def turn_outcomes(
    indices: Iterable[int],
    *,
    rejected: Iterable[int] = (),
    approved: Iterable[int] = (),
    ending: ActorOutcome | None = None,
) -> dict[int, ActorOutcome | None]:
    """Per turn index of one run, whether the actor was wrong, right or unknown (None), from
    the indices of turns with a rejected escalation, those with an approved one, and the run's
    ending (actor_ending)."""
    last_rejected = max(rejected, default=-1)
    approved = set(approved)
    out: dict[int, ActorOutcome | None] = {}
    for index in indices:
        if index <= last_rejected or ending == ActorOutcome.WRONG:
            out[index] = ActorOutcome.WRONG
        elif ending == ActorOutcome.RIGHT or index in approved:
            out[index] = ActorOutcome.RIGHT
        else:
            out[index] = None
    return out


def flagged(probability: float, threshold: Threshold) -> bool:
    """Whether the guardian flagged a turn for a condition: its probability in the uncertain
    band or above it (it did not let the turn continue unattended on that condition)."""
    return threshold.band(probability) != Band.CLEAR


@dataclass(frozen=True, order=True)
class Table:
    """Turns of one run (or of many, summed) for one condition: actor wrong or right, crossed
    with guardian flagged or missed."""

    wrong_flagged: int = 0
    wrong_missed: int = 0
    right_flagged: int = 0
    right_missed: int = 0

    def __add__(self, other: Table) -> Table:
        return Table(*(a + b for a, b in zip(self.cells, other.cells, strict=True)))

    @property
    def cells(self) -> tuple[int, int, int, int]:
        return (self.wrong_flagged, self.wrong_missed, self.right_flagged, self.right_missed)

    @property
    def wrong(self) -> int:
        return self.wrong_flagged + self.wrong_missed

    @property
    def right(self) -> int:
        return self.right_flagged + self.right_missed

    @property
    def turns(self) -> int:
        return self.wrong + self.right

    def key(self) -> str:
        """The table as text ("wf,wm,rf,rm"): a key of a JSON object of tables."""
        return ",".join(str(n) for n in self.cells)

    @classmethod
    def from_key(cls, key: str) -> Table:
        return cls(*(int(part) for part in key.split(",")))

    @classmethod
    def of_turn(cls, outcome: ActorOutcome, was_flagged: bool) -> Table:
        wrong = outcome == ActorOutcome.WRONG
        return cls(
            wrong_flagged=int(wrong and was_flagged),
            wrong_missed=int(wrong and not was_flagged),
            right_flagged=int(not wrong and was_flagged),
            right_missed=int(not wrong and not was_flagged),
        )


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Wilson's score interval for k successes in n trials; None when n is 0."""
    if n <= 0:
        return None
    z = _z(confidence)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def phi(table: Table) -> float | None:
    """The phi coefficient between "guardian missed" and "actor wrong" over `table`; None when
    a margin is empty (one of the two never or always happens)."""
    both, wrong_only = table.wrong_missed, table.wrong_flagged
    missed_only, neither = table.right_missed, table.right_flagged
    margins = (
        (both + wrong_only)
        * (missed_only + neither)
        * (both + missed_only)
        * (wrong_only + neither)
    )
    if margins == 0:
        return None
    return (both * neither - wrong_only * missed_only) / math.sqrt(margins)


@dataclass(frozen=True)
class CorrelatedErrors:
    runs: int
    runs_with_wrong: int
    wrong: int
    misses_on_wrong: int
    miss_rate_on_wrong: float | None
    miss_interval_on_wrong: tuple[float, float] | None
    right: int
    fired_on_right: int
    fire_rate_on_right: float | None
    fire_interval_on_right: tuple[float, float] | None
    miss_rate_on_right: float | None
    difference: float | None  # miss rate on wrong − miss rate on right
    difference_interval: tuple[float, float] | None
    ratio: float | None  # miss rate on wrong / miss rate on right
    ratio_interval: tuple[float, float] | None
    phi: float | None  # between guardian missed and actor wrong
    phi_interval: tuple[float, float] | None
    reading: Reading
    sentence: str
    caution: str
    confidence: float = CONFIDENCE

    @property
    def turns(self) -> int:
        return self.wrong + self.right

    def as_dict(self) -> dict:
        out = asdict(self)
        out["reading"] = self.reading.value
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out


def merge(clusters: Iterable[Mapping[Table, int]]) -> dict[Table, int]:
    """Several {per-run table: how many runs} into one."""
    out: dict[Table, int] = {}
    for part in clusters:
        for table, count in part.items():
            out[table] = out.get(table, 0) + count
    return out


def correlated_errors(
    clusters: Mapping[Table, int],
    *,
    rng: np.random.Generator | None = None,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> CorrelatedErrors:
    """The figures of one condition from its per-run tables ({table: how many runs had it});
    `rng` draws the bootstrap (a fixed-seed one when None, so the same counts give the same
    intervals)."""
    import numpy as np

    clusters = {t: n for t, n in clusters.items() if n > 0 and t.turns > 0}
    total = Table()
    for table, count in clusters.items():
        total = total + Table(*(cell * count for cell in table.cells))
    runs = sum(clusters.values())
    runs_with_wrong = sum(n for t, n in clusters.items() if t.wrong)
    miss_wrong = total.wrong_missed / total.wrong if total.wrong else None
    fire_right = total.right_flagged / total.right if total.right else None
    miss_right = total.right_missed / total.right if total.right else None
    difference = miss_wrong - miss_right if total.wrong and total.right else None
    ratio = miss_wrong / miss_right if difference is not None and miss_right else None

    difference_interval = ratio_interval = phi_interval = None
    if clusters and total.wrong and total.right and resamples > 0:
        rng = rng if rng is not None else np.random.default_rng(SEED)
        tables = list(clusters)
        cells = np.array([t.cells for t in tables], dtype=float)  # K × 4
        weights = np.array([clusters[t] for t in tables], dtype=float)
        draws = rng.multinomial(runs, weights / weights.sum(), size=resamples)  # B × K
        wf, wm, rf, rm = (draws @ cells).T
        with np.errstate(divide="ignore", invalid="ignore"):
            b_miss_wrong = wm / (wf + wm)
            b_miss_right = rm / (rf + rm)
            b_difference = b_miss_wrong - b_miss_right
            b_ratio = b_miss_wrong / b_miss_right
            b_phi = (wm * rf - wf * rm) / np.sqrt((wf + wm) * (rf + rm) * (wm + rm) * (wf + rf))
        difference_interval = _percentiles(b_difference, confidence)
        ratio_interval = _percentiles(b_ratio, confidence) if ratio is not None else None
        phi_interval = _percentiles(b_phi, confidence)

    too_few = total.wrong < MIN_TURNS or total.right < MIN_TURNS or runs_with_wrong < MIN_RUNS
    # No turn at all: there is no figure to be cautious about.
    caution = (
        f"Too few turns to tell: {total.wrong} actor-wrong turns from {runs_with_wrong} "
        f"run{'s' if runs_with_wrong != 1 else ''} and {total.right} actor-right turns; "
        f"at least {MIN_TURNS} of each, the wrong ones from {MIN_RUNS} runs or more, are "
        "needed before a difference means anything."
        if too_few and total.turns
        else ""
    )
    reading, sentence = _reading(too_few, difference_interval, total, miss_wrong, miss_right)
    return CorrelatedErrors(
        runs=runs,
        runs_with_wrong=runs_with_wrong,
        wrong=total.wrong,
        misses_on_wrong=total.wrong_missed,
        miss_rate_on_wrong=miss_wrong,
        miss_interval_on_wrong=wilson_interval(total.wrong_missed, total.wrong, confidence),
        right=total.right,
        fired_on_right=total.right_flagged,
        fire_rate_on_right=fire_right,
        fire_interval_on_right=wilson_interval(total.right_flagged, total.right, confidence),
        miss_rate_on_right=miss_right,
        difference=difference,
        difference_interval=difference_interval,
        ratio=ratio,
        ratio_interval=ratio_interval,
        phi=phi(total),
        phi_interval=phi_interval,
        reading=reading,
        sentence=sentence,
        caution=caution,
        confidence=confidence,
    )


def _reading(
    too_few: bool,
    interval: tuple[float, float] | None,
    total: Table,
    miss_wrong: float | None,
    miss_right: float | None,
) -> tuple[Reading, str]:
    if not total.turns:
        return Reading.TOO_FEW, "No turn to measure yet."
    if too_few or interval is None:
        return Reading.TOO_FEW, (
            f"Too few turns to tell whether independence holds ({total.turns} turns)."
        )
    rates = (
        f"miss rate {miss_wrong:.1%} on {total.wrong} actor-wrong turns against "
        f"{miss_right:.1%} on {total.right} actor-right ones"
    )
    if interval[0] > 0:
        return Reading.DEPENDENT, (
            f"The guardian misses more where the actor is wrong ({rates}): independence does "
            "not hold."
        )
    if interval[1] < 0:
        return Reading.CATCHES, (
            f"The guardian misses less where the actor is wrong ({rates}): it flags the "
            "actor's errors rather than sharing them."
        )
    return Reading.NO_DIFFERENCE, f"No difference beyond noise on {total.turns} turns ({rates})."


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float] | None:
    """The central `confidence` interval of the defined resamples; None when fewer than half
    of them are defined (a resample with no wrong or no right turn has no figure)."""
    import numpy as np

    defined = values[np.isfinite(values)]
    if len(defined) < len(values) / 2:
        return None
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(defined, [tail, 100 - tail])
    return (float(lo), float(hi))


def _z(confidence: float) -> float:
    """The standard normal quantile for a two-sided `confidence` interval (no scipy: the
    inverse of erf by bisection, to 1e-12)."""
    target = 1 - (1 - confidence) / 2
    lo, hi = 0.0, 10.0
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
