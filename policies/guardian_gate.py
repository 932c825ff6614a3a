"""The regression gate on activating a guardian model version: the candidate and what runs on
its adapter use now compared on the labelled examples neither learnt from, and whether the
candidate may be activated."""

import json
from dataclasses import dataclass

from django.conf import settings

from escalations.models import PEOPLES_SOURCES, LabelledExample
from guardian_core.engine.conditions import Condition
from guardian_core.engine.evaluation import TraceRow, evaluate, is_positive, parse_traces
from guardian_core.engine.policy import ON_FIRE, Outcome
from guardian_core.engine.thresholds import Threshold
from guardian_core.models import GuardianModelVersion, PolicyVersion
from policies.harness import (
    EvaluationError,
    guardian_scorer,
    review_share,
    score_rows,
    thresholds_of,
)

# The same arithmetic as the policy version's gate: one tolerance, one reading of "worse".
from policies.policy_gate import (
    _overall,
    as_rollback,
    composition,
    example_cost,
    miss_reasons,
    worse_cost,
    worse_ece,
)

# A drop of AUROC beyond this refuses: the candidate ranks injections and clean outputs (or
# risky and safe calls) less well, whatever its calibration.
AUROC_DROP = 0.02

# Conditions whose firing sends the turn to a person (the rest stop or replan).
_ESCALATING = frozenset(c for c, outcome in ON_FIRE.items() if outcome == Outcome.ESCALATE)


def _tolerance() -> float:
    return float(getattr(settings, "GUARDIAN_GATE_COST_TOLERANCE", 0.05))


def _max_examples() -> int:
    return int(getattr(settings, "GUARDIAN_GATE_MAX_EXAMPLES", 5000))


@dataclass(frozen=True)
class _Example:
    pk: int
    escalation_id: int | None
    condition: str
    projection: dict
    label: object
    probability: float | None
    model_version: str


def _examples(excluded: set[int], limit: int) -> tuple[list[_Example], int]:
    """The newest `limit` of people's labels (PEOPLES_SOURCES) not in `excluded`, oldest
    first, and how many there were in all (before the cap)."""
    rows = LabelledExample.objects.filter(source__in=PEOPLES_SOURCES).exclude(pk__in=excluded)
    total = rows.count()
    newest = rows.order_by("-pk").values_list(
        "pk",
        "verdict__escalation_id",
        "condition",
        "projection",
        "label",
        "probability",
        "model_version",
    )[:limit]
    return [_Example(*row) for row in reversed(newest)], total


def _scored(examples: list[_Example], model: str, *, scorer) -> tuple[list[TraceRow], object]:
    """The examples as trace rows scored by `scorer` (whose model version is `model`). A
    probability stored under exactly that model version is what it would answer: reused, not
    asked again (a network guardian costs a request per row)."""
    lines = []
    for e in examples:
        line = {"condition": e.condition, "projection": e.projection, "label": e.label}
        if e.probability is not None and e.model_version == model:
            line["probability"] = e.probability
        lines.append(json.dumps(line))
    parsed = parse_traces(lines)
    return score_rows(parsed.rows, scorer), parsed


def _escalation_rate(report: dict) -> float | None:
    """The share of examples a person would see: uncertain, or fired where firing escalates."""
    total, escalated = 0, 0
    for name, figures in report["conditions"].items():
        policy = figures.get("policy")
        if policy is None:
            continue
        total += figures["n"]
        escalated += policy["uncertain"]
        if Condition(name) in _ESCALATING:
            escalated += policy["fired"]
    return escalated / total if total else None


def _band(row: TraceRow, threshold: Threshold) -> str:
    # An unscored answer is uncertain for the policy (fail closed); said so, to tell them apart.
    return "unscored" if row.probability is None else str(threshold.band(row.probability))


def guardian_model_gate_report(*, candidate: GuardianModelVersion) -> dict:
    """The gate's report on activating `candidate`, JSON-ready: what its adapter's runs use now
    (the active version, else the adapter as it ships) and the candidate, on the same labelled
    examples — per condition ECE, Brier, band rate and expected cost at the active policy
    version's thresholds, the escalation rate, the examples whose outcome flips — and
    `refused` with the reasons (empty when it passes).

    Examples either model learnt from are left out (a model measured on what it was taught
    looks better than it is); the report counts them. Asks the guardians: call it outside any
    transaction."""
    current = GuardianModelVersion.objects.filter(adapter=candidate.adapter, is_active=True).first()
    policy = PolicyVersion.objects.filter(is_active=True).first()
    tolerance = _tolerance()
    report: dict = {
        "kind": "guardian_model",
        "adapter": candidate.adapter,
        "candidate": candidate.number,
        "candidate_model_version": candidate.model_version,
        "current": current.number if current else None,
        "current_id": current.pk if current else None,
        "current_model_version": current.model_version if current else None,
        "policy_version": policy.number if policy else None,
        "tolerance": tolerance,
        "refused": False,
        "reasons": [],
        "conditions": {},
        "flips": [],
    }
    learnt_by_candidate = set(candidate.example_ids)
    learnt_by_current = set(current.example_ids) if current else set()
    examples, left = _examples(learnt_by_candidate | learnt_by_current, _max_examples())
    report["examples"] = {
        "available": LabelledExample.objects.count(),
        "learnt_by_candidate": len(learnt_by_candidate),
        "learnt_by_current": len(learnt_by_current - learnt_by_candidate),
        "left": left,
        "used": len(examples),
        "capped": len(examples) < left,
    }
    if current is not None and current.pk == candidate.pk:
        report["note"] = "nothing to compare: the candidate is the active version"
        return report
    if not examples:
        report["note"] = (
            "nothing to compare: every labelled example was learnt from by the candidate "
            "or the active version"
            if left == 0 and report["examples"]["available"]
            else "nothing to compare: no labelled examples"
        )
        return report
    if policy is None or policy.problems():
        # Expected cost and bands are read at the active policy's thresholds: without them the
        # candidate cannot be measured, and an unmeasured model is not let through.
        why = "no policy version is active" if policy is None else "the active policy is invalid"
        report.update(refused=True, reasons=[f"cannot measure the candidate: {why}"])
        return report
    thresholds = thresholds_of(policy)
    measured = {}
    for side, number in (("current", report["current"]), ("candidate", candidate.number)):
        try:
            scorer, model = guardian_scorer(
                candidate.adapter, guardian_version=number, policy_version=policy
            )
        except EvaluationError as exc:
            report.update(refused=True, reasons=[f"cannot ask the {side} guardian: {exc}"])
            return report
        try:
            rows, parsed = _scored(examples, model, scorer=scorer)
        finally:
            scorer.close()
        measured[side] = (
            rows,
            evaluate(parsed, thresholds, rows=rows, review_share=review_share()).as_dict(),
        )
    (old_rows, before), (new_rows, after) = measured["current"], measured["candidate"]
    report["examples"]["malformed"] = len(before["malformed"])
    for name, figures in after["conditions"].items():
        old = before["conditions"][name]
        row: dict = {"n": figures["n"]}
        for key in ("ece", "brier"):
            row[key] = {"current": old[key], "candidate": figures[key]}
        # Ranking by the probability the policy compares (risk's and drift's, not their
        # distributions' macro AUROC).
        row["auroc"] = {
            "current": old.get("auroc_compared", old["auroc"]),
            "candidate": figures.get("auroc_compared", figures["auroc"]),
        }
        for key in ("band_rate", "expected_cost"):
            row[key] = {
                "current": (old["policy"] or {}).get(key),
                "candidate": (figures["policy"] or {}).get(key),
            }
        row["unscored"] = {"current": old["unscored"], "candidate": figures["unscored"]}
        report["conditions"][name] = row
        if figures["unscored"] > old["unscored"]:
            # Unscored rows drop out of ECE and cost: a candidate that cannot answer would
            # otherwise look no worse.
            why = next(
                (
                    r.unscored
                    for r in new_rows
                    if r.condition.value == name and r.probability is None
                ),
                "",
            )
            report["reasons"].append(
                f"{name}: the candidate leaves {figures['unscored']} of "
                f"{figures['n'] + figures['unscored']} examples unscored "
                f"(the current {old['unscored']}): {why}"
            )
        if worse_ece(row["ece"]["current"], row["ece"]["candidate"], tolerance):
            report["reasons"].append(
                f"{name}: calibration worsens beyond {tolerance:.0%} (ECE "
                f"{row['ece']['current']:.4f} → {row['ece']['candidate']:.4f})"
            )
        auroc = row["auroc"]
        if (
            auroc["current"] is not None
            and auroc["candidate"] is not None
            and auroc["candidate"] < auroc["current"] - AUROC_DROP
        ):
            # Calibration can look fine for a model that no longer tells the classes apart.
            report["reasons"].append(
                f"{name}: the candidate tells the classes apart less well (AUROC "
                f"{auroc['current']:.3f} → {auroc['candidate']:.3f})"
            )
        cost = row["expected_cost"]
        if worse_cost(cost["current"], cost["candidate"], tolerance):
            report["reasons"].append(
                f"{name}: expected cost per example worsens beyond {tolerance:.0%}: "
                f"{cost['current']:.4f} → {cost['candidate']:.4f} ("
                + composition(old["policy"], figures["policy"])
                + ")"
            )
    for key in ("band_rate", "expected_cost"):
        report[key] = {"current": _overall(before, key), "candidate": _overall(after, key)}
    report["escalation_rate"] = {
        "current": _escalation_rate(before),
        "candidate": _escalation_rate(after),
    }
    cost = report["expected_cost"]
    if worse_cost(cost["current"], cost["candidate"], tolerance):
        report["reasons"].append(
            f"expected cost per example worsens beyond {tolerance:.0%}: "
            f"{cost['current']:.4f} → {cost['candidate']:.4f}"
        )
    answered = {row.line: row for row in new_rows}
    for was in old_rows:
        now = answered.get(was.line)
        if now is None:
            continue  # its stored probability was refused on one side only: nothing to compare
        threshold = thresholds[was.condition]
        old_band, new_band = _band(was, threshold), _band(now, threshold)
        if old_band != new_band:
            example = examples[was.line - 1]
            report["flips"].append(
                {
                    "example_id": example.pk,
                    "escalation_id": example.escalation_id,
                    "condition": was.condition.value,
                    "probability": {"current": was.probability, "candidate": now.probability},
                    "label": example.label,
                    "positive": is_positive(was.condition, example.label),
                    "current": old_band,
                    "candidate": new_band,
                    "cost": {
                        "current": example_cost(
                            old_band, is_positive(was.condition, example.label), threshold
                        ),
                        "candidate": example_cost(
                            new_band, is_positive(was.condition, example.label), threshold
                        ),
                    },
                }
            )
    report["reasons"] += miss_reasons(report["flips"])
    as_rollback(
        report,
        was_active=candidate.activations.filter(retired=False).order_by("-created_at").first(),
    )
    return report
