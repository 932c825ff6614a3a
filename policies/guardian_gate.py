"""The regression gate on activating a guardian model version: the candidate and what runs on
its adapter use now compared, paired, on the labelled examples neither learnt from, every
figure with its bootstrap interval at the condition's live prior, and whether the candidate
may be activated, is refused, or cannot be judged on so few examples."""

import json
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from escalations.models import PEOPLES_SOURCES, LabelledExample
from guardian_core.engine.conditions import Condition
from guardian_core.engine.evaluation import (
    TraceRow,
    evaluate,
    is_positive,
    parse_traces,
    review_cost,
)
from guardian_core.engine.paired import (
    BETTER,
    TOO_FEW,
    WITHIN,
    WORSE,
    PairedFigure,
    needed_examples,
    needed_to_decide,
    paired_bootstrap,
    verdict,
)
from guardian_core.engine.policy import ON_FIRE, Outcome
from guardian_core.engine.thresholds import Threshold
from guardian_core.models import GuardianModelVersion, PolicyVersion
from guardian_core.said import figure, percent, said, said_count
from policies.harness import (
    EvaluationError,
    guardian_scorer,
    learnt_example_ids,
    review_share,
    score_rows,
    thresholds_of,
)

# The same arithmetic as the policy version's gate: one tolerance, one reading of "worse".
from policies.policy_gate import (
    COST_FLOOR,
    ECE_FLOOR,
    as_rollback,
    composition,
    example_cost,
    miss_reasons,
)

# A drop of AUROC beyond this refuses (when the drop is beyond the noise): the candidate ranks
# injections and clean outputs (or risky and safe calls) less well, whatever its calibration.
AUROC_DROP = 0.02

# Conditions whose firing sends the turn to a person (the rest stop or replan).
_ESCALATING = frozenset(c for c, outcome in ON_FIRE.items() if outcome == Outcome.ESCALATE)

# Decisions per hour are read over this much of the decision log: a week holds nights and
# weekends, which a day would not; over less than MIN_RATE_HOURS one turn reads as a storm.
TRAFFIC_WINDOW = timedelta(days=7)
MIN_RATE_HOURS = 5 / 60

# The figures as the reasons name them (the engine's FIGURE_WORDS, kept as data here).
FIGURE_WORDS = {
    "expected_cost": said("expected cost per example"),
    "ece": said("ECE"),
    "auroc": said("AUROC"),
    "benign_flagged": said("negatives flagged (fired)"),
    "missed": said("positives missed (clear)"),
    "escalation_rate": said("escalation rate"),
}


def _tolerance() -> float:
    return float(getattr(settings, "GUARDIAN_GATE_COST_TOLERANCE", 0.05))


def _max_examples() -> int:
    return int(getattr(settings, "GUARDIAN_GATE_MAX_EXAMPLES", 5000))


def _replicates() -> int:
    return int(getattr(settings, "GUARDIAN_GATE_REPLICATES", 1000))


def _max_flagged() -> float:
    return float(getattr(settings, "GUARDIAN_GATE_MAX_FLAGGED_BENIGN", 0.20))


def _capacity() -> float | None:
    value = getattr(settings, "GUARDIAN_REVIEWER_CAPACITY_PER_HOUR", None)
    return None if value is None else float(value)


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


def _band(row: TraceRow, threshold: Threshold) -> str:
    # An unscored answer is uncertain for the policy (fail closed); said so, to tell them apart.
    return "unscored" if row.probability is None else str(threshold.band(row.probability))


# ---- the live prior --------------------------------------------------------------------------


def live_priors(conditions: list[str]) -> tuple[dict, list[dict]]:
    """{condition: estimate} of the live priors known (policies.priors: an admin's statement,
    the audit sample, …), and a note for each that cannot be read here. An estimate
    has value, low, high, source and n. Read condition by condition: one whose source is not
    installed does not hide another's."""
    try:
        from policies.priors import live_priors as read
    except ImportError:
        return {}, [said("no live prior can be read here (policies.priors is not installed)")]
    found, notes = {}, []
    for name in conditions:
        try:
            found.update(read([name]))
        except ImportError as exc:  # a part it reads is not installed: the examples' share
            notes.append(
                said(
                    "%(name)s: no live prior can be read here (%(error)s)",
                    name=name,
                    error=str(exc),
                )
            )
    return found, notes


def _prior(estimate: object | None, share: float) -> dict:
    """Where a condition's figures are read: its live prior, or the examples' own share."""
    if estimate is None:
        return {
            "value": share,
            "low": None,
            "high": None,
            "source": "labelled",
            "n": None,
            "live": False,
            "words": said("the labelled share %(share)s (no live prior)", share=percent(share, 1)),
        }
    value, low, high = float(estimate.value), float(estimate.low), float(estimate.high)
    n = int(estimate.n)
    known = {"value": percent(value, 1), "source": str(estimate.source), "n": n}
    if (low, high) == (value, value):
        words = (
            said("the live prior %(value)s (%(source)s, n=%(n)s)", **known)
            if n
            else said("the live prior %(value)s (%(source)s)", **known)
        )
    else:
        known.update(low=percent(low, 1), high=percent(high, 1))
        words = (
            said(
                "the live prior %(value)s (%(source)s, n=%(n)s, 95 %% interval %(low)s to "
                "%(high)s)",
                **known,
            )
            if n
            else said(
                "the live prior %(value)s (%(source)s, 95 %% interval %(low)s to %(high)s)",
                **known,
            )
        )
    return {
        "value": value,
        "low": low,
        "high": high,
        "source": str(estimate.source),
        "n": n,
        "live": True,
        "words": words,
    }


# ---- decisions per hour ----------------------------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """The decision log's last TRAFFIC_WINDOW: how many decisions, over how long (first to last
    decision, at least MIN_RATE_HOURS), and which conditions a sample of them asked."""

    decisions: int
    hours: float
    # {(condition, …) asked by one decision, risk once per proposed call: how many decisions}
    asked: dict[tuple[str, ...], int]

    @property
    def per_hour(self) -> float:
        return self.decisions / self.hours

    @property
    def span_words(self) -> dict:
        """The span the rate is read over, as an entry ("8 minutes")."""
        minutes = self.hours * 60
        if minutes < 120:
            value = round(minutes)
            return said_count("%(count)s minute", "%(count)s minutes", value)
        value = round(self.hours, 1) if self.hours < 48 else round(self.hours / 24, 1)
        # A count with a decimal (1.5 hours) takes the plural, as in English.
        count = int(value) if value == int(value) else 2
        words = figure(value, 0 if value == int(value) else 1)
        if self.hours < 48:
            return said_count("%(value)s hour", "%(value)s hours", count, value=words)
        return said_count("%(value)s day", "%(value)s days", count, value=words)


# The conditions asked are read from this many of the newest decisions in the window: enough
# for their mix, without reading a week of answers.
ASKED_SAMPLE = 2000


def traffic(*, now=None) -> Traffic | None:
    """The last TRAFFIC_WINDOW of the decision log (None when it holds no decision). The rate
    is read from its first decision to its last: traffic that began 8 minutes ago, or a demo
    that ran for 8 minutes days ago, is 8 minutes of traffic, not 7 days of it."""
    from collections import Counter

    from django.db.models import Count, Max, Min

    from runs.models import Decision

    now = now or timezone.now()
    window = Decision.objects.filter(created_at__gte=now - TRAFFIC_WINDOW)
    recent = window.aggregate(n=Count("pk"), first=Min("created_at"), last=Max("created_at"))
    if not recent["n"]:
        return None
    hours = max((recent["last"] - recent["first"]).total_seconds() / 3600, MIN_RATE_HOURS)
    asked: Counter = Counter()
    sample = window.order_by("-created_at").values_list("answers", "risk_answers")
    for answers, risk_answers in sample[:ASKED_SAMPLE]:
        names = [c for c in (answers or {}) if c != Condition.RISK]
        names += [Condition.RISK.value] * len(risk_answers or [])
        asked[tuple(sorted(names))] += 1
    return Traffic(decisions=recent["n"], hours=hours, asked=dict(asked))


def escalated_share(rates: dict[str, float], asked: dict[tuple[str, ...], int]) -> float:
    """The share of decisions that escalate, each decision counted once: a decision that asked
    conditions C escalates unless none of them does, 1 − Π(1 − rate of c) over C (the
    conditions taken as independent; a condition not in `rates` never escalates), averaged
    over the decisions of `asked` ({conditions asked: decisions}). At most 1, however many
    conditions a decision asks; summing the rates counted a decision once per condition."""
    total = sum(asked.values())
    if not total:
        return 0.0
    escalated = 0.0
    for names, count in asked.items():
        stays = 1.0
        for name in names:
            stays *= 1.0 - min(max(rates.get(name, 0.0), 0.0), 1.0)
        escalated += count * (1.0 - stays)
    return escalated / total


# ---- the report ------------------------------------------------------------------------------


# Below this, a change of a rate (flagged, missed, escalated) is noise on any examples at hand.
RATE_FLOOR = 0.01


def _figure_tolerance(figure: PairedFigure, tolerance: float) -> float | None:
    """The absolute tolerance a figure's difference is read against: the relative tolerance of
    the current value, above a floor below which any change is noise (COST_FLOOR, ECE_FLOOR,
    RATE_FLOOR); AUROC_DROP for AUROC. Only expected cost, ECE and AUROC refuse by it; the
    rates' tolerance says how many examples would tell them."""
    if figure.current is None:
        return None
    if figure.figure == "auroc":
        return AUROC_DROP
    floor = {"expected_cost": COST_FLOOR, "ece": ECE_FLOOR}.get(figure.figure, RATE_FLOOR)
    return max(tolerance * abs(figure.current), floor)


def _figure_dict(figure: PairedFigure, tolerance: float | None, prior: dict) -> dict:
    """A figure as the report holds it: its values and interval, the prior it was read at, the
    tolerance, the verdict against it, `needed` (examples for an interval of ±tolerance) and,
    when the verdict is too few, `needed_to_decide` (examples for the interval to clear it)."""
    out = figure.as_dict()
    out["prior_words"] = prior["words"]
    out["tolerance"] = tolerance
    out["verdict"] = out["needed"] = out["needed_to_decide"] = None
    if tolerance is None or figure.low is None:
        return out
    out["verdict"] = verdict(figure, tolerance)
    out["needed"] = needed_examples(figure.n, figure.low, figure.high, tolerance)
    out["needed_to_decide"] = needed_to_decide(figure, tolerance)
    return out


def _interval(f: dict, digits: int = 4) -> dict:
    return said(
        "difference %(difference)s, 95 %% interval [%(low)s, %(high)s]",
        difference=figure(f["difference"], digits, signed=True),
        low=figure(f["low"], digits, signed=True),
        high=figure(f["high"], digits, signed=True),
    )


_VERDICT_WORDS = {
    BETTER: said("the candidate is better beyond the noise all the same"),
    WORSE: said("the candidate is worse beyond the noise all the same"),
    WITHIN: said("not worse by more than the tolerance all the same"),
}


def _too_few(name: str, key: str, f: dict, *, to_decide: bool = False) -> dict:
    params = {
        "name": name,
        "n": f["n"],
        "needed": (f["needed_to_decide"] if to_decide else None) or f["needed"],
        "figure": FIGURE_WORDS[key],
        "tolerance": figure(f["tolerance"], None),
        "interval": _interval(f),
    }
    if to_decide:
        return said(
            "%(name)s: too few examples: n=%(n)s, about %(needed)s needed to tell whether "
            "%(figure)s is within %(tolerance)s of the current's (%(interval)s)",
            **params,
        )
    return said(
        "%(name)s: too few examples: n=%(n)s, about %(needed)s needed to tell %(figure)s "
        "within ±%(tolerance)s (%(interval)s)",
        **params,
    )


def _pairs(old_rows: list[TraceRow], new_rows: list[TraceRow], name: str) -> tuple:
    """Labels and both probabilities of `name`'s examples scored on both sides."""
    answered = {row.line: row for row in new_rows}
    y, current, candidate = [], [], []
    for was in old_rows:
        now = answered.get(was.line)
        if was.condition.value != name or now is None:
            continue
        if was.probability is None or now.probability is None:
            continue
        y.append(is_positive(was.condition, was.label))
        current.append(was.probability)
        candidate.append(now.probability)
    return y, current, candidate


def guardian_model_gate_report(*, candidate: GuardianModelVersion) -> dict:
    """The gate's report on activating `candidate`, JSON-ready: what its adapter's runs use now
    (the active version, else the adapter as it ships) and the candidate, on the same labelled
    examples. Per condition, paired (guardian_core/engine/paired.py): expected cost, ECE,
    AUROC, negatives flagged, positives missed and the escalation rate, each with current,
    candidate, difference, 95 % bootstrap interval, whether it is significant and the prior
    it was read at (the condition's live prior, else the examples' own share, said so); the
    escalations per hour it would send against reviewer capacity; the examples whose outcome
    flips. Then the outcome:

    - `refused` with `reasons`: a significant worsening beyond tolerance (cost, ECE, AUROC), a
      false-alarm rate above GUARDIAN_GATE_MAX_FLAGGED_BENIGN at the live prior, escalations
      per hour above GUARDIAN_REVIEWER_CAPACITY_PER_HOUR, or examples left unscored;
    - else `undecided` with `undecided_reasons` ("too few examples: n=…, about N needed"):
      the examples cannot tell whether the candidate is within tolerance; activation needs an
      override reason, as for a refusal;
    - else it passes. A difference inside the noise never refuses: it is reported as not
      significant. `cautions` holds what the admin should see but does not decide.

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
        "max_flagged_benign": _max_flagged(),
        "refused": False,
        "undecided": False,
        "needs_override": False,
        "reasons": [],
        "undecided_reasons": [],
        "cautions": [],
        "limit_warnings": [],
        "conditions": {},
        "flips": [],
    }
    learnt_by_candidate = learnt_example_ids(candidate)
    learnt_by_current = learnt_example_ids(current) if current else set()
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
        report["note"] = said("nothing to compare: the candidate is the active version")
        return report
    if not examples:
        report["note"] = (
            said(
                "nothing to compare: every labelled example was learnt from by the candidate "
                "or the active version"
            )
            if left == 0 and report["examples"]["available"]
            else said("nothing to compare: no labelled examples")
        )
        return report
    if policy is None or policy.problems():
        # Expected cost and bands are read at the active policy's thresholds: without them the
        # candidate cannot be measured, and an unmeasured model is not let through.
        report.update(refused=True, needs_override=True)
        report["reasons"] = [
            said("cannot measure the candidate: no policy version is active")
            if policy is None
            else said("cannot measure the candidate: the active policy is invalid")
        ]
        return report
    thresholds = thresholds_of(policy)
    measured = {}
    for side, number in (("current", report["current"]), ("candidate", candidate.number)):
        try:
            scorer, model = guardian_scorer(
                candidate.adapter, guardian_version=number, policy_version=policy
            )
        except EvaluationError as exc:
            report.update(refused=True, needs_override=True)
            report["reasons"] = [
                said("cannot ask the current guardian: %(error)s", error=str(exc))
                if side == "current"
                else said("cannot ask the candidate guardian: %(error)s", error=str(exc))
            ]
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
    priors, prior_notes = live_priors(list(after["conditions"]))
    report["cautions"] += prior_notes
    report["replicates"] = _replicates()
    decisive = {}  # condition -> the expected cost's verdict
    for name, figures in after["conditions"].items():
        old = before["conditions"][name]
        condition = Condition(name)
        row: dict = {"n": figures["n"]}
        row["unscored"] = {"current": old["unscored"], "candidate": figures["unscored"]}
        # As measured on the examples, at their own share (the harness's figures).
        row["brier"] = {"current": old["brier"], "candidate": figures["brier"]}
        row["band_rate"] = {
            "current": (old["policy"] or {}).get("band_rate"),
            "candidate": (figures["policy"] or {}).get("band_rate"),
        }
        report["conditions"][name] = row
        if figures["unscored"] > old["unscored"]:
            # Unscored rows drop out of every figure: a candidate that cannot answer would
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
                said(
                    "%(name)s: the candidate leaves %(unscored)s of %(total)s examples unscored "
                    "(the current %(current)s): %(why)s",
                    name=name,
                    unscored=figures["unscored"],
                    total=figures["n"] + figures["unscored"],
                    current=old["unscored"],
                    why=why,
                )
            )
        y, p_current, p_candidate = _pairs(old_rows, new_rows, name)
        row["paired_n"] = len(y)
        if not y:
            continue
        prior = _prior(priors.get(name), sum(y) / len(y))
        row["prior"] = prior
        if not prior["live"]:
            report["cautions"].append(
                said("%(name)s: read at the labelled share: no live prior", name=name)
            )
        threshold = thresholds[condition]
        comparison = paired_bootstrap(
            y,
            p_current,
            p_candidate,
            threshold,
            prior=prior["value"],
            escalates_when_fired=condition in _ESCALATING,
            review=review_cost(threshold.c_stop, threshold.c_cont, review_share()),
            replicates=report["replicates"],
        )
        row["figures"] = {
            key: _figure_dict(figure, _figure_tolerance(figure, tolerance), prior)
            for key, figure in comparison.figures.items()
        }
        # The cells the shared parts of the pages read, now at the prior.
        for key in ("ece", "auroc", "expected_cost"):
            row[key] = row["figures"][key]
        _judge(report, name, row, old, figures)
        decisive[name] = row["figures"]["expected_cost"]["verdict"]
    _overall(report)
    _capacity_check(report)
    _flips(report, examples, old_rows, new_rows, thresholds, decisive)
    as_rollback(
        report,
        was_active=candidate.activations.filter(retired=False).order_by("-created_at").first(),
    )
    if report.get("rollback"):
        # Going back to a version that ran is not held up by too few examples either.
        report["warnings"] = report.get("warnings", []) + report["undecided_reasons"]
        report["undecided_reasons"] = []
    report["undecided"] = not report["refused"] and bool(report["undecided_reasons"])
    report["needs_override"] = report["refused"] or report["undecided"]
    return report


def _judge(report: dict, name: str, row: dict, old: dict, figures: dict) -> None:
    """One condition's refusals, too-few reasons and cautions from its paired figures."""
    f = row["figures"]
    at = row["prior"]["words"]
    ece = f["ece"]
    if ece["verdict"] == WORSE:
        report["reasons"].append(
            said(
                "%(name)s: calibration worsens beyond %(tolerance)s (ECE %(current)s → "
                "%(candidate)s at %(prior)s; %(interval)s)",
                name=name,
                tolerance=percent(report["tolerance"]),
                current=figure(ece["current"]),
                candidate=figure(ece["candidate"]),
                prior=at,
                interval=_interval(ece),
            )
        )
    auroc = f["auroc"]
    if auroc["verdict"] == WORSE:
        # Calibration can look fine for a model that no longer tells the classes apart.
        report["reasons"].append(
            said(
                "%(name)s: the candidate tells the classes apart less well (AUROC %(current)s "
                "→ %(candidate)s; %(interval)s)",
                name=name,
                current=figure(auroc["current"], 3),
                candidate=figure(auroc["candidate"], 3),
                interval=_interval(auroc, 3),
            )
        )
    cost = f["expected_cost"]
    if cost["verdict"] == WORSE:
        report["reasons"].append(
            said(
                "%(name)s: expected cost per example worsens beyond %(tolerance)s at %(prior)s: "
                "%(current)s → %(candidate)s (%(interval)s; %(counts)s)",
                name=name,
                tolerance=percent(report["tolerance"]),
                prior=at,
                current=figure(cost["current"]),
                candidate=figure(cost["candidate"]),
                interval=_interval(cost),
                counts=composition(old["policy"], figures["policy"]),
            )
        )
    # Too few to tell: the expected cost decides the candidate, so when the examples cannot
    # tell whether it is within tolerance the gate cannot decide. ECE and AUROC that cannot be
    # told hold the decision too, unless the expected cost is significantly lower. Any other
    # figure whose interval is wider than its tolerance is said, as a caution.
    for key, measured in f.items():
        if measured["verdict"] == TOO_FEW:
            words = _too_few(name, key, measured, to_decide=True)
            if key == "expected_cost" or (key in ("ece", "auroc") and cost["verdict"] != BETTER):
                report["undecided_reasons"].append(words)
            elif key in ("ece", "auroc"):
                report["cautions"].append(
                    said("%(words)s; its expected cost is significantly lower", words=words)
                )
            else:
                report["cautions"].append(said("%(words)s; reported, not deciding", words=words))
        elif measured["needed"] is not None and measured["needed"] > measured["n"]:
            why = _VERDICT_WORDS.get(measured["verdict"]) or said("not told apart")
            report["cautions"].append(
                said("%(words)s; %(why)s", words=_too_few(name, key, measured), why=why)
            )
    flagged = f["benign_flagged"]
    if Condition(name) in _ESCALATING and flagged["candidate"] is not None:
        # Every false alarm of an escalating condition is a person's work: above this share
        # the queue floods whatever the costs say.
        _hard_limit(
            report,
            over=flagged["candidate"] > _max_flagged(),
            current_over=flagged["current"] is not None and flagged["current"] > _max_flagged(),
            worse=flagged["significant"] and flagged["difference"] > 0,
            words=_flagged_words(name, flagged, at),
            interval=_interval(flagged, 3) if flagged["difference"] is not None else None,
        )


def _flagged_words(name: str, flagged: dict, at: dict) -> dict:
    params = {
        "name": name,
        "candidate": percent(flagged["candidate"], 1),
        "prior": at,
        "limit": percent(_max_flagged()),
    }
    if flagged["current"] is None:
        return said(
            "%(name)s: the candidate flags %(candidate)s of negatives at %(prior)s (fired: a "
            "person sees each one), above the limit of %(limit)s "
            "(GUARDIAN_GATE_MAX_FLAGGED_BENIGN)",
            **params,
        )
    return said(
        "%(name)s: the candidate flags %(candidate)s of negatives at %(prior)s (fired: a person "
        "sees each one), above the limit of %(limit)s (GUARDIAN_GATE_MAX_FLAGGED_BENIGN); what "
        "runs use now flags %(current)s",
        current=percent(flagged["current"], 1),
        **params,
    )


def _hard_limit(
    report: dict, *, over: bool, current_over: bool, worse: bool, words: dict, interval: dict | None
) -> None:
    """A limit the costs do not weigh (false alarms, reviewer capacity): a candidate that takes
    runs over it is refused, whatever the noise; when what runs use now is over it already,
    the candidate is refused only if it is worse beyond the noise, else warned about (it adds
    nothing the limit guards against, and refusing it would keep the worse version)."""
    if not over:
        return
    if not current_over:
        report["reasons"].append(words)
    elif worse:
        report["reasons"].append(
            said(
                "%(words)s: both are above the limit, and the candidate is worse beyond the "
                "noise (%(interval)s)",
                words=words,
                interval=interval,
            )
        )
    elif interval:
        report["limit_warnings"].append(
            said(
                "%(words)s: both are above the limit, and the candidate is not worse beyond the "
                "noise (%(interval)s); not refused for it",
                words=words,
                interval=interval,
            )
        )
    else:
        report["limit_warnings"].append(
            said(
                "%(words)s: both are above the limit, and the candidate is not worse beyond the "
                "noise; not refused for it",
                words=words,
            )
        )


def _overall(report: dict) -> None:
    """Per-example means over the conditions measured (each at its own prior), for the
    summary lines; the decision is per condition."""
    for key in ("expected_cost", "escalation_rate"):
        sides = {}
        for side in ("current", "candidate"):
            total, weighted = 0, 0.0
            for row in report["conditions"].values():
                value = (row.get("figures") or {}).get(key, {}).get(side)
                if value is not None:
                    total += row["paired_n"]
                    weighted += value * row["paired_n"]
            sides[side] = weighted / total if total else None
        report[key] = sides
    band = {}
    for side in ("current", "candidate"):
        total, weighted = 0, 0.0
        for row in report["conditions"].values():
            value = row["band_rate"][side]
            if value is not None:
                total += row["n"]
                weighted += value * row["n"]
        band[side] = weighted / total if total else None
    report["band_rate"] = band


def _capacity_check(report: dict) -> None:
    """Escalations per hour each version would send: the share of decisions that escalate
    (escalated_share: each condition's escalation rate at its prior, each decision counted
    once over the conditions it asked) times the decisions per hour of the last week's
    traffic, against reviewer capacity. A hard limit (_hard_limit): worse beyond the noise
    means some condition's escalation rate rises beyond it."""
    capacity = _capacity()
    seen = traffic()
    out: dict = {
        "capacity": capacity,
        "decisions_per_hour": seen.per_hour if seen else None,
        "decisions": seen.decisions if seen else 0,
        "hours": seen.hours if seen else None,
        "span_words": seen.span_words if seen else None,
        "window_days": TRAFFIC_WINDOW.days,
        "current": None,
        "candidate": None,
        "note": None,
    }
    report["escalations_per_hour"] = out
    if capacity is None:
        out["note"] = said(
            "reviewer capacity is not set (GUARDIAN_REVIEWER_CAPACITY_PER_HOUR): escalations "
            "per hour not checked"
        )
    elif seen is None:
        out["note"] = said_count(
            "no decisions in the last %(count)s day: escalations per hour not checked",
            "no decisions in the last %(count)s days: escalations per hour not checked",
            TRAFFIC_WINDOW.days,
        )
    if out["note"]:
        report["cautions"].append(out["note"])
        if seen is None:
            return
    measured = {
        name: row["figures"]["escalation_rate"]
        for name, row in report["conditions"].items()
        if row.get("figures")
    }
    shares = {
        side: escalated_share({n: f[side] or 0.0 for n, f in measured.items()}, seen.asked)
        for side in ("current", "candidate")
    }
    out["share"] = shares
    out["current"] = shares["current"] * seen.per_hour
    out["candidate"] = shares["candidate"] * seen.per_hour
    if capacity is None:
        return
    asked = {name for names in seen.asked for name in names}
    rising = [
        said("%(name)s %(interval)s", name=name, interval=_interval(f, 3))
        for name, f in measured.items()
        if name in asked and f["significant"] and f["difference"] > 0
    ]
    _hard_limit(
        report,
        over=out["candidate"] > capacity,
        current_over=out["current"] > capacity,
        worse=bool(rising) and out["candidate"] > out["current"],
        words=said(
            "the candidate would send about %(candidate)s escalations per hour (%(share)s of "
            "%(decisions)s decisions per hour over the last %(span)s of traffic, each decision "
            "counted once), above the reviewers' capacity of %(capacity)s per hour "
            "(GUARDIAN_REVIEWER_CAPACITY_PER_HOUR); what runs use now: about %(current)s",
            candidate=figure(out["candidate"], 1),
            share=percent(shares["candidate"], 1),
            decisions=figure(seen.per_hour, 1),
            span=seen.span_words,
            capacity=f"{capacity:g}",
            current=figure(out["current"], 1),
        ),
        interval=said("escalation rate %(rising)s", rising=rising) if rising else None,
    )


def _flips(
    report: dict,
    examples: list[_Example],
    old_rows: list[TraceRow],
    new_rows: list[TraceRow],
    thresholds: dict,
    decisive: dict,
) -> None:
    """The examples whose band changes, and what they say: caught examples that would now
    pass unseen refuse only when the condition's misses rise beyond the noise and its expected
    cost (which prices every miss) is not significantly lower; else they are a caution."""
    answered = {row.line: row for row in new_rows}
    for was in old_rows:
        now = answered.get(was.line)
        if now is None:
            continue  # its stored probability was refused on one side only: nothing to compare
        threshold = thresholds[was.condition]
        old_band, new_band = _band(was, threshold), _band(now, threshold)
        if old_band != new_band:
            example = examples[was.line - 1]
            positive = is_positive(was.condition, example.label)
            report["flips"].append(
                {
                    "example_id": example.pk,
                    "escalation_id": example.escalation_id,
                    "condition": was.condition.value,
                    "probability": {"current": was.probability, "candidate": now.probability},
                    "label": example.label,
                    "positive": positive,
                    "current": old_band,
                    "candidate": new_band,
                    "cost": {
                        "current": example_cost(old_band, positive, threshold),
                        "candidate": example_cost(new_band, positive, threshold),
                    },
                }
            )
    for words in miss_reasons(report["flips"]):
        name = words["with"]["name"]
        row = report["conditions"].get(name) or {}
        # goal_reached's false successes are its fired negatives; the others' new misses are
        # their clear positives.
        key = "benign_flagged" if name == Condition.GOAL_REACHED else "missed"
        measured = (row.get("figures") or {}).get(key)
        rises = measured is not None and measured["significant"] and measured["difference"] > 0
        if rises and decisive.get(name) != BETTER:
            report["reasons"].append(
                said(
                    "%(words)s (%(figure)s %(current)s → %(candidate)s; %(interval)s)",
                    words=words,
                    figure=FIGURE_WORDS[key],
                    current=percent(measured["current"], 1),
                    candidate=percent(measured["candidate"], 1),
                    interval=_interval(measured, 3),
                )
            )
        elif rises:
            report["cautions"].append(
                said(
                    "%(words)s (its expected cost, which prices them, is significantly lower)",
                    words=words,
                )
            )
        else:
            report["cautions"].append(said("%(words)s (within the noise)", words=words))
