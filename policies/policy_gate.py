"""The regression gate on activating a policy version: the active version and a candidate
compared on the labelled examples, and whether the candidate may be activated."""

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Q
from django.urls import NoReverseMatch, reverse

from guardian_core.engine.conditions import Condition
from guardian_core.engine.evaluation import is_positive, review_cost
from guardian_core.engine.policy import ON_FIRE, Outcome
from guardian_core.engine.thresholds import Band
from guardian_core.models import PolicyVersion
from guardian_core.said import figure, percent, said, said_count
from policies.harness import thresholds_of, traces_evaluate

if TYPE_CHECKING:
    from policies.policy_diff import Change

# Measured figures where lower is better; a relative worsening beyond the tolerance refuses.
_GUARDED = ("expected_cost", "ece")


def _tolerance() -> float:
    return float(getattr(settings, "GUARDIAN_GATE_COST_TOLERANCE", 0.05))


def _max_examples() -> int:
    return int(getattr(settings, "GUARDIAN_GATE_MAX_EXAMPLES", 5000))


def _near_miss_filter(versions: Iterable[PolicyVersion]) -> Q:
    """Examples within 2δ of t* at any compared version: where a threshold change decides the
    outcome. The probability stored with an example is the one the policy compares."""
    near = Q(pk__in=[])
    for version in versions:
        for condition, threshold in thresholds_of(version).items():
            reach = 2 * threshold.delta + 1e-9  # 2δ exactly is a near-miss, float error aside
            near |= Q(
                condition=condition.value,
                probability__gte=threshold.t_star - reach,
                probability__lte=threshold.t_star + reach,
            )
    return near


def gate_examples(versions: list[PolicyVersion], limit: int) -> tuple[list[dict], int, int]:
    """The labelled examples the gate replays (people's labels, PEOPLES_SOURCES), in the
    export's trace format: at most `limit`,
    near-misses first (newest first within each group), chosen in the database so that a
    report reads `limit` rows however many examples there are; how many could be replayed
    (those with a probability: no model is asked); and how many of those kept are near-misses.
    """
    from escalations.examples import labelled_examples_export
    from escalations.models import PEOPLES_SOURCES, LabelledExample

    scored = LabelledExample.objects.filter(probability__isnull=False, source__in=PEOPLES_SOURCES)
    near_filter = _near_miss_filter(versions)
    available = scored.count()
    near = list(scored.filter(near_filter).order_by("-pk").values_list("pk", flat=True)[:limit])
    far = (
        list(
            scored.exclude(near_filter)
            .order_by("-pk")
            .values_list("pk", flat=True)[: limit - len(near)]
        )
        if len(near) < limit
        else []
    )
    by_id = {e["example_id"]: e for e in labelled_examples_export(example_ids=near + far)}
    return [by_id[pk] for pk in near + far if pk in by_id], available, len(near)


def _example_url(example: dict) -> str | None:
    try:
        if example.get("escalation_id"):
            return reverse("escalations:detail", args=[example["escalation_id"]])
    except NoReverseMatch:
        return None
    return None


def _overall(report: dict, key: str) -> float | None:
    """The per-example mean of a policy figure over every condition measured."""
    total, weighted = 0, 0.0
    for figures in report["conditions"].values():
        policy = figures.get("policy")
        if policy is None or policy.get(key) is None:
            continue
        total += figures["n"]
        weighted += policy[key] * figures["n"]
    return weighted / total if total else None


# What a replay of recorded probabilities at new thresholds cannot tell: the guardian answered
# the examples under the old questions, no judge settled their band, and quorum, limits and
# caps act on live runs only. Changes there are listed for the admin, never silently passed.
_UNMEASURED_FIELDS = ("question_set", "judge", "quorum", "limits")


def unmeasured_changes(current: PolicyVersion, candidate: PolicyVersion) -> list["Change"]:
    """The candidate's changes from `current` the gate does not measure (policy_diff's
    Change: its field and its words)."""
    from policies.policy_diff import version_diff

    return [
        change
        for change in version_diff(current, candidate)
        if change.field.split(".", 1)[0] in _UNMEASURED_FIELDS
    ]


def _refuses_unmeasured(field: str) -> bool:
    # A question added, removed or reworded, or any change of the judge: the recorded
    # probabilities answered something else. A new question set name alone, quorum and limits
    # are listed for the admin without refusing.
    return field.startswith("question_set.") or field.split(".", 1)[0] == "judge"


def _worse(before: float | None, after: float | None, tolerance: float) -> bool:
    if before is None or after is None:
        return False
    return after > before * (1 + tolerance) + 1e-12


def gate_report(*, candidate: PolicyVersion) -> dict:
    """The gate's report on activating `candidate`, JSON-ready: per condition ECE, Brier, band
    rate and expected cost at the current and the candidate version, the examples whose
    outcome flips, and `refused` with the reasons (empty when it passes). Reasons and notes are
    sentences kept as data (guardian_core/said.py), worded in each reader's language."""
    current = PolicyVersion.objects.filter(is_active=True).first()
    tolerance = _tolerance()
    report: dict = {
        "candidate": candidate.number,
        "current": current.number if current else None,
        "tolerance": tolerance,
        "refused": False,
        "reasons": [],
        "conditions": {},
        "flips": [],
    }
    problems = candidate.problems()
    if problems:
        report.update(
            refused=True,
            reasons=[said("the candidate is invalid: %(problem)s", problem=p) for p in problems],
        )
        return report
    unmeasured = []
    if current is not None and current.pk != candidate.pk:
        unmeasured = unmeasured_changes(current, candidate)
        report["unmeasured"] = [change.words for change in unmeasured]
    versions = [v for v in (current, candidate) if v is not None]
    examples, available, near = gate_examples(versions, _max_examples())
    report["examples"] = {
        "available": available,
        "used": len(examples),
        "capped": len(examples) < available,
        "near_misses": near,
        "near_miss_share": near / len(examples) if examples else None,
    }
    if current is None or current.pk == candidate.pk or not examples:
        report["note"] = (
            said("nothing to compare: no version is active")
            if current is None
            else said("the candidate is the active version")
            if current.pk == candidate.pk
            else said("no labelled example with a probability")
        )
        return report
    lines = [json.dumps(e) for e in examples]
    # Priced at the costs in force now, and, when the candidate states other costs, at its own
    # too: a cost worse at both is a regression; one worse at one only is the change of risk
    # appetite the candidate states, shown for the admin to weigh. The hard reasons below catch
    # what no appetite excuses.
    report["priced_at"] = current.number
    before = traces_evaluate(lines=lines, policy_number=current.number)
    after = traces_evaluate(lines=lines, policy_number=candidate.number, priced_at=current.number)
    own = None
    if _costs_differ(current, candidate):
        own = (
            traces_evaluate(lines=lines, policy_number=current.number, priced_at=candidate.number),
            traces_evaluate(lines=lines, policy_number=candidate.number),
        )
        report["own_costs"] = {"conditions": {}}
    for name, figures in after["conditions"].items():
        old = before["conditions"][name]
        row = {"n": figures["n"]}
        for key in ("ece", "brier"):
            row[key] = {"current": old[key], "candidate": figures[key]}
        for key in ("band_rate", "expected_cost"):
            row[key] = {
                "current": (old["policy"] or {}).get(key),
                "candidate": (figures["policy"] or {}).get(key),
            }
        report["conditions"][name] = row
        if worse_ece(row["ece"]["current"], row["ece"]["candidate"], tolerance):
            report["reasons"].append(
                said(
                    "%(name)s: calibration worsens beyond %(tolerance)s (ECE %(current)s → "
                    "%(candidate)s)",
                    name=name,
                    tolerance=percent(tolerance),
                    current=figure(row["ece"]["current"]),
                    candidate=figure(row["ece"]["candidate"]),
                )
            )
        cost = row["expected_cost"]
        at_own = None
        if own is not None:
            at_own = {
                "current": (own[0]["conditions"][name]["policy"] or {}).get("expected_cost"),
                "candidate": (own[1]["conditions"][name]["policy"] or {}).get("expected_cost"),
            }
            report["own_costs"]["conditions"][name] = at_own
        if worse_cost(cost["current"], cost["candidate"], tolerance) and (
            at_own is None or worse_cost(at_own["current"], at_own["candidate"], tolerance)
        ):
            # Per condition too: a worse integrity is not paid for by a better goal_reached.
            report["reasons"].append(
                said(
                    "%(name)s: expected cost per example worsens beyond %(tolerance)s: "
                    "%(current)s → %(candidate)s (%(counts)s)",
                    name=name,
                    tolerance=percent(tolerance),
                    current=figure(cost["current"]),
                    candidate=figure(cost["candidate"]),
                    counts=composition(old["policy"], figures["policy"]),
                )
            )
    report["band_rate"] = {
        "current": _overall(before, "band_rate"),
        "candidate": _overall(after, "band_rate"),
    }
    report["expected_cost"] = {
        "current": _overall(before, "expected_cost"),
        "candidate": _overall(after, "expected_cost"),
    }
    if own is not None:
        report["own_costs"]["expected_cost"] = {
            "current": _overall(own[0], "expected_cost"),
            "candidate": _overall(own[1], "expected_cost"),
        }
    cost = report["expected_cost"]
    cost_own = (report.get("own_costs") or {}).get("expected_cost")
    if worse_cost(cost["current"], cost["candidate"], tolerance) and (
        cost_own is None or worse_cost(cost_own["current"], cost_own["candidate"], tolerance)
    ):
        report["reasons"].append(
            said(
                "expected cost per example worsens beyond %(tolerance)s: %(current)s → "
                "%(candidate)s",
                tolerance=percent(tolerance),
                current=figure(cost["current"]),
                candidate=figure(cost["candidate"]),
            )
        )
    old_t, new_t = thresholds_of(current), thresholds_of(candidate)
    for example in examples:
        condition = Condition(example["condition"])
        was = old_t[condition].band(example["probability"])
        now = new_t[condition].band(example["probability"])
        if was != now:
            positive = is_positive(condition, example["label"])
            report["flips"].append(
                {
                    "example_id": example.get("example_id"),
                    "escalation_id": example.get("escalation_id"),
                    "url": _example_url(example),
                    "condition": condition.value,
                    "probability": example["probability"],
                    "label": example["label"],
                    "positive": positive,
                    "current": str(was),
                    "candidate": str(now),
                    # What the example costs either way, at the costs in force.
                    "cost": {
                        "current": example_cost(str(was), positive, old_t[condition]),
                        "candidate": example_cost(str(now), positive, old_t[condition]),
                    },
                }
            )
    report["reasons"] += miss_reasons(report["flips"])
    report["reasons"] += [
        said("not measured by the gate, so not let through unasked: %(change)s", change=c.words)
        for c in unmeasured
        if _refuses_unmeasured(c.field)
    ]
    as_rollback(report, was_active=candidate.activations.order_by("-created_at").first())
    return report


def _costs_differ(a: PolicyVersion, b: PolicyVersion) -> bool:
    ta, tb = thresholds_of(a), thresholds_of(b)
    return any((ta[c].c_stop, ta[c].c_cont) != (tb[c].c_stop, tb[c].c_cont) for c in ta if c in tb)


# Below these, a worsening is noise on the examples at hand, not a regression: a relative
# tolerance alone would refuse an ECE of 0.0000 → 0.0004.
ECE_FLOOR = 0.01
COST_FLOOR = 0.001


def worse_ece(before: float | None, after: float | None, tolerance: float) -> bool:
    return _worse(before, after, tolerance) and after - before > ECE_FLOOR


def worse_cost(before: float | None, after: float | None, tolerance: float) -> bool:
    return _worse(before, after, tolerance) and after - before > COST_FLOOR


def example_cost(band: str, positive: bool, prices) -> float:
    """What one example costs in `band`, priced as the harness prices it: a review in the band
    (or without a usable answer), C_stop for a false stop, C_cont for a miss."""
    from policies.harness import review_share

    if band not in (Band.FIRED, Band.CLEAR):
        return review_cost(prices.c_stop, prices.c_cont, review_share())
    if band == Band.FIRED:
        return 0.0 if positive else prices.c_stop
    return prices.c_cont if positive else 0.0


def composition(before: dict | None, after: dict | None) -> list[dict] | dict:
    """What makes a cost change, in counts: reviews, false stops and misses, more or fewer (a
    list of entries, said joined), or "the same counts"."""
    parts = []
    for key in ("uncertain", "false_stop", "false_continue"):
        delta = (after or {}).get(key, 0) - (before or {}).get(key, 0)
        if not delta:
            continue
        signed = f"{delta:+d}"
        if key == "uncertain":
            parts.append(
                said_count("%(signed)s review", "%(signed)s reviews", abs(delta), signed=signed)
            )
        elif key == "false_stop":
            parts.append(
                said_count(
                    "%(signed)s false stop", "%(signed)s false stops", abs(delta), signed=signed
                )
            )
        else:
            parts.append(
                said_count("%(signed)s miss", "%(signed)s misses", abs(delta), signed=signed)
            )
    return parts or said("the same counts")


def miss_reasons(flips: list[dict]) -> list[dict]:
    """The refusals no risk appetite excuses: per escalating condition, examples that hold and
    that a person saw under the current version which would now pass unseen (new_misses); and
    runs that would now stop with success where the goal was not reached (false_successes).
    Each entry's parameter `name` is its condition."""
    reasons = []
    for name, ids in new_misses(flips).items():
        reasons.append(
            said_count(
                "%(name)s: %(count)s labelled example that was caught (a person saw it) would "
                "now pass unseen: %(examples)s",
                "%(name)s: %(count)s labelled examples that were caught (a person saw them) "
                "would now pass unseen: %(examples)s",
                len(ids),
                name=name,
                examples=_examples_named(ids),
            )
        )
    ids = false_successes(flips)
    if ids:
        reasons.append(
            said_count(
                "%(name)s: %(count)s run whose goal was not reached would now stop with "
                "success, its answer taken as final: %(examples)s",
                "%(name)s: %(count)s runs whose goal was not reached would now stop with "
                "success, their answer taken as final: %(examples)s",
                len(ids),
                name=Condition.GOAL_REACHED.value,
                examples=_examples_named(ids),
            )
        )
    return reasons


def _examples_named(ids: list[int]) -> dict:
    shown = ", ".join(str(i) for i in ids[:10]) + (", …" if len(ids) > 10 else "")
    return said_count("example %(ids)s", "examples %(ids)s", len(ids), ids=shown)


def false_successes(flips: list[dict]) -> list[int]:
    """Examples whose goal was not reached that the candidate would stop with success (the
    current version did not): the failure of a rejected refund that ends "succeeded"."""
    return [
        flip["example_id"]
        for flip in flips
        if flip["condition"] == Condition.GOAL_REACHED
        and flip.get("positive") is False
        and flip["candidate"] == Band.FIRED
        and flip["current"] != Band.FIRED
    ]


def new_misses(flips: list[dict]) -> dict[str, list[int]]:
    """Per escalating condition (integrity, risk: firing sends the turn to a person), the
    examples that hold and that the candidate would let through where the current version
    sent them to a person: the one mistake a gate must never wave through on averages."""
    missed: dict[str, list[int]] = {}
    for flip in flips:
        condition = Condition(flip["condition"])
        if ON_FIRE[condition] != Outcome.ESCALATE or not flip.get("positive"):
            continue
        if flip["candidate"] == Band.CLEAR and flip["current"] != Band.CLEAR:
            missed.setdefault(condition.value, []).append(flip["example_id"])
    return missed


def as_rollback(report: dict, *, was_active) -> None:
    """Set `refused` from the reasons, unless the candidate is a rollback: it was active before
    (`was_active`, its last activation record) and then the gate passed it. Its figures are
    shown and what would refuse a new version is kept as warnings: going back to a version
    that ran is the safe move in an incident and must not wait for an override. A version
    that only ever ran by an override is gated again, override and all."""
    passed = was_active is not None and not was_active.override_reason
    if not passed:
        report["refused"] = bool(report["reasons"])
        return
    report["rollback"] = {"last_activated_at": was_active.created_at.isoformat()}
    report["warnings"], report["reasons"] = report["reasons"], []
    report["refused"] = False
