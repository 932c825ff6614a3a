"""The learning loop's Django side: guardian model versions made from labelled examples (a
calibration map per condition over any adapter, or the local guardian retrained), their
activation through the regression gate (guardian_gate.py), and the guardian a run or the harness
gets for a version.

What a version learnt from is recorded with it (example ids and a digest of their content);
what it scored on examples it did not learn from is in its `figures`, per condition, before
(the base guardian) and after (the version). A version is used by runs only once activated,
and at most one is active per adapter (a database constraint).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Max, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.translation import gettext as _

from escalations.models import PEOPLES_SOURCES, LabelledExample
from guardian_core.engine.calibration import (
    DEFAULT_SEED,
    FitRefused,
    MapFit,
    apply_map,
    calibration_figures,
    fit_map,
    split_indices,
)
from guardian_core.engine.canonical import sha256_hex
from guardian_core.engine.conditions import Condition, compared_probability, parse_answer
from guardian_core.engine.evaluation import DEFAULT_BINS, TraceRow, is_positive
from guardian_core.engine.priors import prior_weights
from guardian_core.models import GuardianAdapter, GuardianModelKind, GuardianModelVersion
from guardian_core.said import worded
from policies.model_versions import LearningError, guardian_model_version_get
from policies.models import (
    GuardianModelActivation,
    GuardianModelJob,
    GuardianModelJobKind,
    GuardianModelJobStatus,
)

# numpy and scikit-learn load with the first function that needs them, not with the module:
# no web or worker process pays for them at start (`python -X importtime manage.py check`).
if TYPE_CHECKING:
    import numpy as np

Progress = Callable[[int, int], None]
GUARDIAN_MODEL_JOB_TASK = "guardian_core.run_guardian_model_job"
logger = logging.getLogger(__name__)


class GuardianGateRefused(LearningError):
    """The regression gate refused an activation, or could not decide on too few examples, and
    no override reason was given; `report` is the gate's report (its "reasons", or its
    "undecided_reasons" when `report["undecided"]`, say why)."""

    def __init__(self, message: str, report: dict) -> None:
        super().__init__(message)
        self.report = report


# ---- which version -------------------------------------------------------------------------


# ---- activation -------------------------------------------------------------------------------


def guardian_model_activate(
    *,
    number: int,
    activated_by: AbstractBaseUser | None = None,
    comment: str = "",
    override_reason: str = "",
) -> GuardianModelVersion:
    """Make version `number` the one runs on its adapter use, retiring the one active before,
    in one transaction (the one-active-per-adapter constraint holds at every moment), once the
    regression gate lets it through (see `guardian_model_activate_replacing`)."""
    return guardian_model_activate_replacing(
        number=number,
        activated_by=activated_by,
        comment=comment,
        override_reason=override_reason,
    )[0]


def guardian_model_activate_replacing(
    *,
    number: int,
    activated_by: AbstractBaseUser | None = None,
    comment: str = "",
    override_reason: str = "",
) -> tuple[GuardianModelVersion, GuardianModelVersion | None]:
    """`guardian_model_activate`, also returning the version it retired (None when none of the
    adapter was active, or version `number` already was), read under the same locks.

    The regression gate (policies/guardian_gate.py) first measures the candidate against
    what the adapter's runs use now; when it refuses, LearningError names every reason and
    nothing changes, unless `override_reason` says why to go ahead anyway. Each activation is
    recorded (who, the comment, the gate's report, the override's reason) in the transaction
    that activates it."""
    from policies.guardian_gate import guardian_model_gate_report

    version = guardian_model_version_get(number=number)
    override_reason = override_reason.strip()
    # Measured before any lock is taken: the gate asks the guardians (a network one too).
    report = guardian_model_gate_report(candidate=version)
    # Too few examples to tell is not a pass: it needs an admin's reason like a refusal.
    needs_override = report["refused"] or report.get("undecided", False)
    if needs_override and not override_reason:
        raise GuardianGateRefused(
            f"guardian model version {number} cannot be activated, the regression gate "
            + ("refuses it:\n" if report["refused"] else "cannot decide on the examples it has:\n")
            + "".join(
                f"  - {worded(reason)}\n"
                for reason in report["reasons"] or report.get("undecided_reasons", [])
            )
            + "give an override reason to activate it anyway",
            report,
        )
    with transaction.atomic():
        # Lock the adapter's versions in one order: two activations at once queue up instead
        # of tripping the constraint.
        list(
            GuardianModelVersion.objects.select_for_update()
            .filter(adapter=version.adapter)
            .order_by("pk")
            .values_list("pk")
        )
        active = GuardianModelVersion.objects.filter(
            adapter=version.adapter, is_active=True
        ).first()
        if (active.pk if active else None) != report["current_id"]:
            # The gate compared the candidate with another model than the one it would replace.
            raise LearningError(
                _(
                    "guardian model version %(number)s was not activated: the active "
                    "%(adapter)s version changed while the gate measured it; run it again"
                )
                % {"number": number, "adapter": version.adapter}
            )
        replaced = active if active is not None and active.pk != version.pk else None
        if replaced is not None:
            GuardianModelVersion.objects.filter(pk=replaced.pk).update(is_active=False)
        GuardianModelVersion.objects.filter(pk=version.pk).update(is_active=True)
        GuardianModelActivation.objects.create(
            version=version,
            activated_by=activated_by if getattr(activated_by, "is_authenticated", False) else None,
            comment=comment.strip(),
            gate_report=report,
            override_reason=override_reason if needs_override else "",
        )
        from policies.shadow import shadow_trials_stop_for  # runs imports this module

        shadow_trials_stop_for(
            guardian_model_version_id=version.pk,
            user=activated_by,
            note=f"guardian model version {version.number} was activated: runs on its adapter "
            "now answer with it for real.",
        )
    version.is_active = True
    if replaced is not None:
        replaced.is_active = False
    return version, replaced


def guardian_model_deactivate(
    *, adapter: str, retired_by: AbstractBaseUser | None = None, comment: str = ""
) -> GuardianModelVersion | None:
    """Runs on `adapter` go back to the adapter as it ships, recorded in the retired version's
    history (who, why). The version retired, or None when none was active."""
    with transaction.atomic():
        retired = (
            GuardianModelVersion.objects.select_for_update()
            .filter(adapter=adapter, is_active=True)
            .first()
        )
        if retired is None:
            return None
        GuardianModelVersion.objects.filter(pk=retired.pk).update(is_active=False)
        GuardianModelActivation.objects.create(
            version=retired,
            activated_by=retired_by if getattr(retired_by, "is_authenticated", False) else None,
            comment=comment.strip(),
            retired=True,
        )
    retired.is_active = False
    return retired


# ---- recalibration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Scored:
    example_ids: list[int]
    p: list[float]
    y: list[bool]
    reused: int
    unscored: int


def guardian_model_recalibrate(
    *,
    adapter: str,
    conditions: Sequence[str] | None = None,
    over: int | None = None,
    include_judge: bool = False,
    live_priors: Mapping[str, float] | None = None,
    created_by: AbstractBaseUser | None = None,
    seed: int = DEFAULT_SEED,
    bins: int = DEFAULT_BINS,
    progress: Progress | None = None,
) -> GuardianModelVersion:
    """A new, inactive, recalibrated version of `adapter` (stacked on version `over`, when
    given: say a retrained local guardian): per condition (those named, else every condition
    with labelled examples) a map fitted on the base's probabilities of people's labelled
    examples (reviewers' verdicts and imports; the judge's too only with `include_judge`),
    chosen on a held-out split (engine/calibration.py), and moved from the share of positives
    it learnt at to the live prior (policies/priors.py: `live_priors` as stated, else
    GUARDIAN_LIVE_PRIORS, the audit sample, or the traffic's scores), which it records. A
    stored probability is reused when the example was scored by the same base model version;
    the others are asked of the guardian.

    LearningError, creating nothing, when a condition has too few examples or one class only
    (every such condition is named), or nothing is labelled at all."""
    from policies.harness import EvaluationError, guardian_scorer, score_rows

    _check_adapter(adapter)
    wanted = _conditions(conditions)
    underneath = None
    if over is not None:
        underneath = guardian_model_version_get(number=over)
        if underneath.adapter != adapter:
            raise LearningError(
                f"--over: version {over} is a {underneath.adapter} guardian, not {adapter}"
            )
    try:
        scorer, base_version = guardian_scorer(adapter, guardian_version=over)
    except EvaluationError as exc:
        raise LearningError(str(exc)) from exc
    try:
        labelled = LabelledExample.objects.filter(condition__in=[c.value for c in wanted])
        if not include_judge:
            labelled = labelled.filter(source__in=PEOPLES_SOURCES)
        examples = list(
            labelled.order_by("pk").values_list(
                "pk", "condition", "projection", "label", "probability", "model_version"
            )
        )
        present = [c for c in wanted if any(e[1] == c.value for e in examples)]
        if conditions is None:
            wanted = present
        if not wanted:
            raise LearningError(
                f"no labelled examples{_BY_PEOPLE[include_judge]}: nothing to recalibrate on "
                f"({HOW_TO_LABEL})"
            )
        rows = [
            TraceRow(
                line=pk,
                condition=Condition(condition),
                projection=projection,
                label=label,
                # The same base model scored it: its stored probability is what it would say.
                probability=probability if model_version == base_version else None,
            )
            for pk, condition, projection, label, probability, model_version in examples
        ]
        reused = {row.line for row in rows if row.probability is not None}
        rows = score_rows(rows, scorer, progress=progress)
    finally:
        scorer.close()
    fits: dict[Condition, MapFit] = {}
    scored: dict[Condition, _Scored] = {}
    problems = []
    for condition in wanted:
        mine = [row for row in rows if row.condition == condition]
        usable = [row for row in mine if row.probability is not None]
        scored[condition] = _Scored(
            example_ids=[row.line for row in usable],
            p=[row.probability for row in usable],
            y=[is_positive(condition, row.label) for row in usable],
            reused=sum(row.line in reused for row in usable),
            unscored=len(mine) - len(usable),
        )
        try:
            fits[condition] = fit_map(
                scored[condition].p, scored[condition].y, seed=seed, bins=bins
            )
        except FitRefused as exc:
            # "0 with a probability" reads as a scoring failure when nothing was labelled.
            why = str(exc) if mine else "no labelled examples" + _BY_PEOPLE[include_judge]
            unscored = [row.unscored for row in mine if row.probability is None]
            if unscored:  # what the guardian said instead, once: the rest are alike
                why += f"; {len(unscored)} not scored by the guardian ({unscored[0]})"
            problems.append(f"{condition}: {why}")
    if problems:
        raise LearningError(_refusal(problems, ready=list(fits), named=conditions is not None))
    fed: list[int] = []
    figures: dict[str, dict] = {}
    digest_parts = []
    maps: dict[str, dict] = {}
    for condition, fit in fits.items():
        s = scored[condition]
        fit_ids = [s.example_ids[i] for i in fit.fit_indices]
        fed += fit_ids
        digest_parts += [[s.example_ids[i], s.p[i], s.y[i]] for i in fit.fit_indices]
        maps[condition.value], prior = _at_live_prior(
            condition, fit, base_version, (live_priors or {}).get(condition.value)
        )
        figures[condition.value] = {
            **fit.as_dict(),
            "examples": len(s.example_ids) + s.unscored,
            "reused_probabilities": s.reused,
            "unscored": s.unscored,
            "held_out_ids": [s.example_ids[i] for i in fit.held_out_indices],
            "seed": seed,
            "bins": bins,
            "include_judge": include_judge,
            "prior": prior,
            **_held_out_at_prior(maps[condition.value], fit, s, bins),
            "held_out_paired": _held_out_paired(condition, maps[condition.value], fit, s, bins),
        }
    return _version_create(
        adapter=adapter,
        over=underneath,
        base_model_version=base_version,
        kind=GuardianModelKind.RECALIBRATED,
        calibration=maps,
        example_ids=sorted(fed),
        examples_digest=_digest(sorted(fed), digest_parts),
        figures=figures,
        created_by=created_by,
    )


def _at_live_prior(
    condition: Condition, fit: MapFit, base_version: str, stated: float | None
) -> tuple[dict, dict]:
    """The fitted map moved to the live prior when one is known, and what the version records
    of both priors (the page shows them)."""
    from policies.priors import live_prior

    mapping = {**fit.mapping, "prior": dict(fit.mapping["prior"])}
    fitted = mapping["prior"]["fitted"]
    unshifted = {key: value for key, value in mapping.items() if key != "prior"}
    estimate = live_prior(
        condition,
        stated=stated,
        model_version=base_version,
        calibrated=lambda raw: [apply_map(unshifted, p) for p in raw],
        fitted=fitted,
    )
    recorded: dict = {"fitted": fitted, "live": None}
    if estimate is None:
        recorded["note"] = (
            "no live prior known (none stated, too few audit samples labelled, too little "
            "traffic scored by this base): the map answers at the labelled share"
        )
    else:
        mapping["prior"]["live"] = round(estimate.value, 6)
        recorded["live"] = estimate.as_dict()
    return mapping, recorded


def _held_out_paired(
    condition: Condition, mapping: dict, fit: MapFit, s: _Scored, bins: int
) -> dict:
    """The held-out examples' figures before (the base) and after (the map), paired, each
    difference with its bootstrap interval, at the live prior the map answers at (else the
    held-out share) and the active policy's threshold: on 60 rows an ECE that "fell" may be
    noise, and the interval says so (engine/paired.py)."""
    held = list(fit.held_out_indices)
    raw = [s.p[i] for i in held]
    return _paired_figures(
        condition,
        [s.y[i] for i in held],
        raw,
        [apply_map(mapping, v) for v in raw],
        (mapping.get("prior") or {}).get("live"),
        bins,
    )


def _paired_figures(
    condition: Condition,
    y: Sequence[bool],
    before: Sequence[float],
    after: Sequence[float],
    prior: float | None,
    bins: int,
) -> dict:
    """Before and after on the same held-out examples, paired, each difference with its
    bootstrap interval, at `prior` (None: the examples' own share of positives) and the active
    policy's threshold (the version's page shows the ECE's)."""
    from guardian_core.engine.paired import paired_bootstrap
    from guardian_core.engine.thresholds import default_policy
    from guardian_core.models import PolicyVersion
    from policies.harness import thresholds_of

    policy = PolicyVersion.objects.filter(is_active=True).first()
    thresholds = (
        thresholds_of(policy) if policy and not policy.problems() else default_policy().thresholds
    )
    comparison = paired_bootstrap(y, before, after, thresholds[condition], prior=prior, bins=bins)
    return {
        "prior": comparison.prior,
        "replicates": comparison.replicates,
        "figures": {
            name: figure.as_dict()
            for name, figure in comparison.figures.items()
            if name in ("ece", "expected_cost", "benign_flagged", "missed")
        },
    }


def _held_out_at_prior(mapping: dict, fit: MapFit, s: _Scored, bins: int) -> dict:
    """The held-out figures read at the live prior the map answers at (each example weighted,
    engine/priors.py), raw and mapped; {} when the map records no live prior."""
    import numpy as np

    live = (mapping.get("prior") or {}).get("live")
    if live is None:
        return {}
    held = list(fit.held_out_indices)
    p = np.array([s.p[i] for i in held], dtype=float)
    y = np.array([s.y[i] for i in held], dtype=bool)
    weights = prior_weights(y, live)
    mapped = np.array([apply_map(mapping, v) for v in p])
    return {
        "before_at_live_prior": calibration_figures(p, y, bins, weights),
        "after_at_live_prior": calibration_figures(mapped, y, bins, weights),
    }


# What "no labelled examples" means, with or without the judge's labels.
_BY_PEOPLE = {
    False: " by people (the judge's labels count only with --include-judge)",
    True: "",
}

# Where labelled examples come from, for every refusal that wants more of them.
HOW_TO_LABEL = "examples come from reviewers' verdicts, or manage.py import_examples FILE"


def _refusal(problems: list[str], *, ready: list[Condition], named: bool) -> str:
    """Why nothing was created, and what to do: more examples, or (when the conditions were
    not named) a rerun on the conditions that could be recalibrated now."""
    text = "cannot recalibrate: " + " | ".join(problems) + f" ({HOW_TO_LABEL})"
    if named:
        return text  # the admin chose these conditions: no --condition advice
    if not ready:
        return text + "; no condition has enough examples yet"
    rerun = " ".join(f"--condition {c.value}" for c in ready)
    return (
        text + f"; these could be recalibrated now: {', '.join(c.value for c in ready)} "
        f"(rerun with {rerun})"
    )


def _digest(ids: list[int], content: list) -> str:
    rows = LabelledExample.objects.filter(pk__in=ids).order_by("pk")
    stored = list(rows.values_list("pk", "condition", "projection", "label"))
    return sha256_hex({"examples": stored, "used": content})


def _version_create(**fields) -> GuardianModelVersion:
    limit = GuardianModelVersion._meta.get_field("base_model_version").max_length
    if len(fields["base_model_version"]) > limit:
        # The decision log's column holds the base and "/cal-N" in 120 characters.
        raise LearningError(
            f"the guardian's model version is longer than {limit} characters: "
            f"{fields['base_model_version'][:40]}…"
        )
    try:
        with transaction.atomic():
            number = (GuardianModelVersion.objects.aggregate(n=Max("number"))["n"] or 0) + 1
            return GuardianModelVersion.objects.create(number=number, **fields)
    except IntegrityError as exc:  # another version took the number in between
        raise LearningError(
            "another guardian model version was created at the same time: run it again"
        ) from exc


def _check_adapter(adapter: str) -> None:
    if adapter not in GuardianAdapter.values:
        raise LearningError(
            f"--model: unknown guardian {adapter!r} (known: {', '.join(GuardianAdapter.values)})"
        )


def _conditions(names: Sequence[str] | None) -> list[Condition]:
    if names is None:
        return list(Condition)
    bad = [name for name in names if name not in Condition.__members__.values()]
    if bad:
        known = ", ".join(c.value for c in Condition)
        raise LearningError(f"--condition: unknown {', '.join(map(repr, bad))} (known: {known})")
    return list(dict.fromkeys(Condition(name) for name in names))


# ---- the local guardian, retrained ------------------------------------------------------------

# Fewer examples of a condition than this and none are held out: all of them are taught, and
# the version's figures for it say there was nothing to measure on.
MIN_TO_HOLD_OUT = 10


def guardian_model_retrain_local(
    *,
    conditions: Sequence[str] | None = None,
    include_judge: bool = False,
    created_by: AbstractBaseUser | None = None,
    seed: int = DEFAULT_SEED,
    bins: int = DEFAULT_BINS,
) -> GuardianModelVersion:
    """A new, inactive, retrained version of the local guardian: its bundled corpus plus the
    labelled examples of each condition (those named, else all with examples; people's only
    unless `include_judge`), minus a held-out share on which the bundled and the retrained
    model are compared. No model is stored: the version's guardian retrains from the bundled
    corpus plus `example_ids` at first use in each process (deterministically;
    adapters/local.py)."""
    import numpy as np

    from guardian_core.adapters.local import LocalGuardian, model_for, retrained_model_remember
    from training.fit import corpus_examples, train

    wanted = _conditions(conditions)
    labelled = LabelledExample.objects.filter(condition__in=[c.value for c in wanted])
    if not include_judge:
        # The judge's labels teach the guardian to agree with another model, not with people.
        labelled = labelled.filter(source__in=PEOPLES_SOURCES)
    examples = list(labelled.order_by("pk").values_list("pk", "condition", "projection", "label"))
    if not examples:
        raise LearningError(
            f"no labelled examples{_BY_PEOPLE[include_judge]}: nothing to teach the local guardian"
        )
    base_version = LocalGuardian().model_version
    taught: list[int] = []
    figures: dict[str, dict] = {}
    fitted: dict[Condition, object] = {}
    for condition in wanted:
        mine = [e for e in examples if e[1] == condition.value]
        if not mine:
            continue
        y = np.array([is_positive(condition, e[3]) for e in mine], dtype=bool)
        if len(mine) >= MIN_TO_HOLD_OUT and min(y.sum(), (~y).sum()) >= 2:
            fit, held = split_indices(y, seed=seed)
        else:
            fit, held = np.arange(len(mine)), np.array([], dtype=int)
        teach = [mine[i] for i in fit]
        taught += [e[0] for e in teach]
        entry: dict = {
            "taught": len(teach),
            "n_held_out": len(held),
            "seed": seed,
            "include_judge": include_judge,
        }
        if len(held):
            model = train(
                condition,
                [*corpus_examples(condition), *(_trace(e) for e in teach)],
            )
            projections = [mine[i][2] for i in held]
            labels = y[held]
            entry["held_out_ids"] = [mine[i][0] for i in held]
            before = _compared(condition, model_for(condition).answers(projections))
            after = _compared(condition, model.answers(projections))
            entry["before"] = calibration_figures(before, labels, bins)
            entry["after"] = calibration_figures(after, labels, bins)
            # On a few dozen held-out rows an ECE that moved may be noise: its interval says.
            entry["held_out_paired"] = _paired_figures(condition, labels, before, after, None, bins)
            fitted[condition] = model
        figures[condition.value] = entry
    version = _version_create(
        adapter=GuardianAdapter.LOCAL,
        base_model_version=base_version,
        kind=GuardianModelKind.RETRAINED,
        calibration={},
        example_ids=sorted(taught),
        examples_digest=_digest(sorted(taught), []),
        figures=figures,
        created_by=created_by,
    )
    # Fitted on the corpus plus exactly the examples the version teaches, in id order: the
    # model its guardian would fit at first use in this process (a recalibration next).
    for condition, model in fitted.items():
        retrained_model_remember(version.model_version, condition, model)
    return version


def _trace(example: tuple) -> dict:
    pk, condition, projection, label = example
    return {"condition": condition, "projection": projection, "label": label}


def _compared(condition: Condition, answers: list) -> np.ndarray:
    """The compared probability of each held-out answer (the policy's reading of it)."""
    import numpy as np

    out = []
    for answer in answers:
        p = compared_probability(condition, parse_answer(condition, answer))
        out.append(0.5 if p is None else p)  # a local model always answers; never expected
    return np.array(out, dtype=float)


# ---- jobs: a version asked for from the admins' page -------------------------------------------


def guardian_model_job_problems(
    *, kind: str, adapter: str, conditions: Sequence[str] = (), over: int | None = None
) -> dict[str, list[str]]:
    """Every bad field of a job request: an unknown kind, adapter or condition, a retraining
    of anything but the local guardian, a version to stack on that is not one of the
    adapter's, is itself a map, or comes with a kind that does not stack; and ("job") a job
    the same as one queued or running. {} when it may be queued."""
    problems: dict[str, list[str]] = {}
    if kind not in GuardianModelJobKind.values:
        problems["kind"] = [
            _("Choose one of: %(choices)s.") % {"choices": ", ".join(GuardianModelJobKind.values)}
        ]
    if adapter not in GuardianAdapter.values:
        problems["adapter"] = [
            _("Choose one of: %(choices)s.") % {"choices": ", ".join(GuardianAdapter.values)}
        ]
    elif kind in _RETRAINING and adapter != GuardianAdapter.LOCAL:
        problems["adapter"] = [_("Only the local guardian can be retrained here.")]
    unknown = [c for c in conditions if c not in Condition.__members__.values()]
    if unknown:
        problems["conditions"] = [_("Unknown: %(names)s.") % {"names": ", ".join(unknown)}]
    if over is not None:
        under = GuardianModelVersion.objects.filter(number=over).first()
        if kind != GuardianModelJobKind.RECALIBRATE:
            problems["over"] = [_("Only a recalibration sits on another version.")]
        elif under is None:
            problems["over"] = [
                _("There is no guardian model version %(number)s.") % {"number": over}
            ]
        elif under.adapter != adapter:
            problems["over"] = [
                _("Version %(number)s is a %(under)s guardian, not %(adapter)s.")
                % {"number": over, "under": under.adapter, "adapter": adapter}
            ]
        elif under.kind == GuardianModelKind.RECALIBRATED:
            # A map over a map refits answers already mapped (…/cal-3/cal-4): fit afresh over
            # what the map sits on instead.
            base = (
                _("version %(number)s") % {"number": under.over.number}
                if under.over_id
                else _("none (as it ships)")
            )
            problems["over"] = [
                _(
                    "Version %(number)s is itself a map: a new map sits on a retrained version "
                    "or on the guardian as it ships. Choose %(base)s, what version %(number)s "
                    "sits on, to fit its map again."
                )
                % {"number": over, "base": base}
            ]
    if not problems:
        same = guardian_model_job_unfinished_same(
            kind=kind, adapter=adapter, conditions=conditions, over=over
        )
        if same is not None:
            problems["job"] = [
                _(
                    "Job %(pk)s, the same (kind, guardian, conditions, version underneath), is "
                    "already %(status)s: its version will appear here. Not queued again."
                )
                % {"pk": same.pk, "status": same.get_status_display().lower()}
            ]
    return problems


def guardian_model_job_unfinished_same(
    *, kind: str, adapter: str, conditions: Sequence[str] = (), over: int | None = None
) -> GuardianModelJob | None:
    """A queued or running job asking for what this one would (same kind, adapter, set of
    conditions and version underneath): two identical jobs would make two identical
    versions. None when there is none."""
    unfinished = GuardianModelJob.objects.filter(
        kind=kind,
        adapter=adapter,
        status__in=[GuardianModelJobStatus.QUEUED, GuardianModelJobStatus.RUNNING],
    )
    unfinished = (
        unfinished.filter(over__isnull=True)
        if over is None
        else unfinished.filter(over__number=over)
    )
    wanted = set(conditions)
    return next(
        (job for job in unfinished.order_by("pk") if set(job.conditions or []) == wanted), None
    )


_RETRAINING = (GuardianModelJobKind.RETRAIN, GuardianModelJobKind.RETRAIN_RECALIBRATE)


def guardian_model_job_start(
    *,
    kind: str,
    adapter: str,
    conditions: Sequence[str] = (),
    over: int | None = None,
    created_by: AbstractBaseUser | None = None,
) -> GuardianModelJob:
    """Ask a worker for a new guardian model version (runs/queue's broker, after commit).

    Raises ValidationError naming every bad field (guardian_model_job_problems)."""
    problems = guardian_model_job_problems(
        kind=kind, adapter=adapter, conditions=conditions, over=over
    )
    if problems:
        raise ValidationError(problems)
    with transaction.atomic():
        job = GuardianModelJob.objects.create(
            kind=kind,
            adapter=adapter,
            conditions=list(dict.fromkeys(conditions)),
            over=GuardianModelVersion.objects.get(number=over) if over is not None else None,
            created_by=created_by if getattr(created_by, "is_authenticated", False) else None,
        )
        # By name, as runs/queue.py sends its tasks: the tasks module imports this one. The
        # name predates this app, so messages queued before the move still find the task.
        transaction.on_commit(
            lambda: current_app.send_task(
                GUARDIAN_MODEL_JOB_TASK, args=(job.pk,), ignore_result=True
            )
        )
    return job


def guardian_model_job_run(*, job_id: int) -> str:
    """Run a queued job: claim it (a duplicate message finds nothing to claim), make the
    version, record what came of it. Returns the job's status afterwards; a refusal of the
    learning loop (too few examples, a guardian that cannot answer) is the job's error, said in
    the loop's words. Retrain-then-recalibrate records the recalibrated version; when only the
    retraining succeeded, the retrained one, and the error says why the map is missing."""
    now = timezone.now()
    claimed = GuardianModelJob.objects.filter(
        pk=job_id, status=GuardianModelJobStatus.QUEUED
    ).update(status=GuardianModelJobStatus.RUNNING, started_at=now, heartbeat_at=now)
    if not claimed:
        return "skipped"
    job = GuardianModelJob.objects.select_related("created_by", "over").get(pk=job_id)
    conditions = job.conditions or None
    version = None
    try:
        with _heartbeat(job_id):
            if job.kind in _RETRAINING:
                version = guardian_model_retrain_local(
                    conditions=conditions, created_by=job.created_by
                )
            if job.kind != GuardianModelJobKind.RETRAIN:
                under = version or job.over
                version = guardian_model_recalibrate(
                    adapter=job.adapter,
                    conditions=conditions,
                    over=under.number if under else None,
                    created_by=job.created_by,
                )
    except LearningError as exc:
        return _job_end(job, version=version, error=_after(version, str(exc)))
    except Exception as exc:  # recorded for the admin; the worker goes on with other work
        logger.exception("guardian model job %s failed", job_id)
        return _job_end(
            job, version=version, error=_after(version, f"{type(exc).__name__}: {exc}"[:2000])
        )
    return _job_end(job, version=version)


def _after(retrained: GuardianModelVersion | None, error: str) -> str:
    if retrained is None:
        return error
    return f"retrained as version {retrained.number}; recalibrating over it failed: {error}"


def _job_end(job: GuardianModelJob, *, version=None, error: str = "") -> str:
    # Unconditional: a job the sweeper failed as too slow that finishes after all says what
    # it made, the worker's outcome replacing the sweeper's guess.
    status = GuardianModelJobStatus.FAILED if error else GuardianModelJobStatus.DONE
    GuardianModelJob.objects.filter(pk=job.pk).update(
        status=status, version=version, error=error, finished_at=timezone.now()
    )
    return status


@contextmanager
def _heartbeat(job_id: int) -> Iterator[None]:
    """While the body runs, a thread records the job's sign of life every
    GUARDIAN_MODEL_JOB_HEARTBEAT_SECONDS (fitting blocks the worker's own thread for minutes).
    The thread dies with the worker, and the silence is what the sweeper reads."""
    stop = threading.Event()
    every = settings.GUARDIAN_MODEL_JOB_HEARTBEAT_SECONDS

    def beat() -> None:
        try:
            while not stop.wait(every):
                GuardianModelJob.objects.filter(
                    pk=job_id, status=GuardianModelJobStatus.RUNNING
                ).update(heartbeat_at=timezone.now())
        except Exception:  # a missed beat is the sweeper's to judge, not a failed job
            logger.exception("guardian model job %s: heartbeat stopped", job_id)
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=beat, name=f"guardian-model-job-{job_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# A running job whose worker gave no sign of life for this many heartbeats died with it.
SILENT_BEATS = 4

WORKER_DIED = (
    "The worker stopped while it was making this version (no sign of life since {since} UTC: "
    "killed, out of memory, or its machine restarted), so it will not finish. Start the "
    "worker again if it is down, then ask for the version again here."
)
TOOK_TOO_LONG = (
    "Still running after {minutes} minutes (GUARDIAN_MODEL_JOB_TIMEOUT_MINUTES), so it is no "
    "longer waited for. If its worker does finish, this job says what it made; otherwise ask "
    "again, for fewer conditions or with a longer timeout."
)
NEVER_PICKED_UP = (
    "No worker picked this job up in {minutes} minutes (GUARDIAN_MODEL_JOB_TIMEOUT_MINUTES): "
    "is a worker running? Start one, then ask for the version again here."
)


def guardian_model_jobs_sweep(*, now: datetime | None = None) -> list[int]:
    """Fail the jobs no worker will finish (beat, every minute; policies.tasks), each with an
    error that says what happened and what to do: a running job whose worker has been silent
    for SILENT_BEATS heartbeats (it died with the job), one running longer than
    GUARDIAN_MODEL_JOB_TIMEOUT_MINUTES, and one queued that long with no worker picking it up.

    Failed, not retried: a job that killed its worker (out of memory on a large fit) would
    kill the next one too; the admin asks again once the worker is up. Each is failed by a
    conditional update on the condition that found it, so a heartbeat or a worker's own end
    written in between is never overwritten by a stale read. Returns the ids failed."""
    now = now or timezone.now()
    minutes = settings.GUARDIAN_MODEL_JOB_TIMEOUT_MINUTES
    silent_since = now - timedelta(
        seconds=SILENT_BEATS * settings.GUARDIAN_MODEL_JOB_HEARTBEAT_SECONDS
    )
    too_old = now - timedelta(minutes=minutes)
    running = GuardianModelJob.objects.filter(status=GuardianModelJobStatus.RUNNING)
    # A job claimed before heartbeats existed has none: its start is its last sign of life.
    silent = running.annotate(last_sign=Coalesce("heartbeat_at", "started_at")).filter(
        last_sign__lt=silent_since
    )
    failed: list[int] = []
    for pk, last_sign in silent.values_list("pk", "last_sign"):
        since = last_sign.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        failed += _job_fail(silent, pk, WORKER_DIED.format(since=since), now)
    slow = running.filter(started_at__lt=too_old).exclude(pk__in=failed)
    for pk in slow.values_list("pk", flat=True):
        failed += _job_fail(slow, pk, TOOK_TOO_LONG.format(minutes=minutes), now)
    unclaimed = GuardianModelJob.objects.filter(
        status=GuardianModelJobStatus.QUEUED, created_at__lt=too_old
    )
    for pk in unclaimed.values_list("pk", flat=True):
        failed += _job_fail(unclaimed, pk, NEVER_PICKED_UP.format(minutes=minutes), now)
    return failed


def _job_fail(found: QuerySet, pk: int, error: str, now: datetime) -> list[int]:
    """Fail job `pk` if `found` (the condition it was found by) still selects it; [pk] when
    it did, [] when a heartbeat, its worker's end or another sweep came first."""
    if not found.filter(pk=pk).update(
        status=GuardianModelJobStatus.FAILED, error=error, finished_at=now
    ):
        return []
    logger.warning("guardian model job %s swept to failed: %s", pk, error.split(" (", 1)[0])
    return [pk]
