"""The evaluation harness's Django side: the policy version that gives t*, δ and the costs, the
guardian that scores rows without a probability, and the report of a trace file.

The arithmetic is the engine's (guardian_core/engine/evaluation.py); `manage.py evaluate` and
any page call `traces_evaluate` here, so they report the same figures.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from django.conf import settings

from guardian_core.engine.conditions import Condition, Malformed
from guardian_core.engine.evaluation import (
    DEFAULT_BINS,
    TraceRow,
    evaluate,
    parse_traces,
    with_answer,
)
from guardian_core.engine.thresholds import Threshold
from guardian_core.models import GuardianModelVersion, PolicyVersion
from guardian_core.trace_files import EvaluationError
from policies.model_versions import LearningError, guardian_model_version_get

# Guardians the harness can build. The in-process ones are what the evaluation page offers (the
# onnx one where GUARDIAN_ONNX_MODELS names models: `offered_models`); the command also asks the
# network guardians (as runs/ports.py builds them from settings), row by row,
# NETWORK_CONCURRENCY rows at a time: a trace set costs a request per row there.
MODELS = ("local", "onnx")
NETWORK_MODELS = ("http", "openai")
ALL_MODELS = MODELS + NETWORK_MODELS
NETWORK_CONCURRENCY = 8
# Rows asked in one batch: large enough that a batch costs little more than one row, small
# enough that the progress bar moves.
CHUNK = 500
# A batch of CHUNK rows takes well under a second; the deadline only keeps a wedged model
# from hanging the command (its rows are then unscored, and say so).
BATCH_DEADLINE_SECONDS = 120.0

Scorer = Callable[[Condition, Sequence[Mapping]], list[object]]
Progress = Callable[[int, int], None]


def offered_models() -> tuple[str, ...]:
    """The in-process guardians this installation can build: the onnx one only when
    GUARDIAN_ONNX_MODELS names its models."""
    return tuple(m for m in MODELS if m != "onnx" or settings.GUARDIAN_ONNX_MODELS)


def policy_version_for_evaluation(number: int | None) -> PolicyVersion:
    """Version `number`, or the active one; EvaluationError when there is none or it is
    invalid (the engine could not use it, so neither can the harness)."""
    if number is None:
        version = PolicyVersion.objects.filter(is_active=True).first()
        if version is None:
            # `migrate` makes the shipped default active on a fresh database; this is one an
            # admin retired (runs cannot start either) or a database restored without one.
            known = ", ".join(
                str(n)
                for n in PolicyVersion.objects.order_by("number").values_list("number", flat=True)
            )
            raise EvaluationError(
                "no policy version is active, so runs cannot start either: activate one, or "
                f"name one with --policy (known: {known or 'none'})"
            )
    else:
        version = PolicyVersion.objects.filter(number=number).first()
        if version is None:
            known = ", ".join(
                str(n)
                for n in PolicyVersion.objects.order_by("number").values_list("number", flat=True)
            )
            raise EvaluationError(f"no policy version {number} (known: {known or 'none'})")
    problems = version.problems()
    if problems:
        raise EvaluationError(f"policy version {version.number} is invalid: " + "; ".join(problems))
    return version


def thresholds_of(version: PolicyVersion) -> dict[Condition, Threshold]:
    return {
        Condition(name): Threshold(c_stop=v["c_stop"], c_cont=v["c_cont"], delta=v["delta"])
        for name, v in version.thresholds.items()
    }


class GuardianScorer:
    """A batch scorer over one guardian: (condition, projections) -> raw answers. The local
    guardian answers a batch in one call; a network guardian is asked row by row, a bounded
    number at a time. `close()` releases a network guardian's client."""

    def __init__(self, guardian: object, model: str) -> None:
        self.guardian = guardian
        self.model = model  # the adapter's name
        self.model_version = str(guardian.model_version)

    def __call__(self, condition: Condition, projections: Sequence[Mapping]) -> list[object]:
        return _batch_answers(self.guardian, condition, list(projections))

    def close(self) -> None:
        close = getattr(self.guardian, "close", None)
        if close is not None:
            close()


def _batch_answers(guardian: object, condition: Condition, projections: list) -> list[object]:
    from guardian_core.adapters.calibrated import CalibratedGuardian

    if isinstance(guardian, CalibratedGuardian):
        if guardian.refused:
            return [Malformed(guardian.refused)] * len(projections)
        inner = _batch_answers(guardian.inner, condition, projections)
        return [guardian.calibrated(condition, answer) for answer in inner]
    model = getattr(guardian, "model", None)
    if callable(model):  # the local guardian (bundled or retrained): one batch per call
        # The same answers as guardian.answer(projection, [condition]) row by row (a test
        # holds them equal), asked as one batch: 10 000 rows in seconds rather than a minute.
        # Risk goes through the gate's own batch call, which refuses a projection with no
        # pending call as the loop does.
        if condition == Condition.RISK:
            return guardian.assess_risk(projections)
        return model(condition).answers(projections)
    with ThreadPoolExecutor(NETWORK_CONCURRENCY, thread_name_prefix="evaluate") as pool:
        return list(pool.map(partial(_one_answer, guardian, condition), projections))


def _one_answer(guardian: object, condition: Condition, projection: Mapping) -> object:
    """One row's raw answer from a network guardian, as the loop would ask it; a failure is
    that row's Malformed answer."""
    try:
        if condition == Condition.RISK:
            if not isinstance(projection.get("pending_proposal"), Mapping):
                return Malformed("no pending proposal to assess")
            return guardian.assess_risk([projection])[0]
        return dict(guardian.answer(projection, [condition])).get(condition.value)
    except Exception as exc:  # a failed guardian: this row is unscored, and says why
        return Malformed(f"guardian failed: {type(exc).__name__}: {exc}"[:300])


def guardian_scorer(
    model: str | None,
    *,
    guardian_version: int | None = None,
    policy_version: PolicyVersion | None = None,
) -> tuple[GuardianScorer, str]:
    """A batch scorer for guardian `model` (as guardian model version `guardian_version`, when
    given: an inactive one too, so a candidate is measured before it is activated) and the
    model version it reports. A network guardian asks the questions of `policy_version` (else
    the active one), as a run pinned to it would."""
    from runs.models import Run
    from runs.ports import base_guardian

    version = None
    if guardian_version is not None:
        try:
            version = guardian_model_version_get(number=guardian_version)
        except LearningError as exc:
            raise EvaluationError(f"--guardian-version: {exc}") from exc
        if model is not None and model != version.adapter:
            raise EvaluationError(
                f"--guardian-version: version {version.number} is a {version.adapter} guardian, "
                f"not {model}"
            )
        model = version.adapter
    if model not in ALL_MODELS:
        raise EvaluationError(f"--model: unknown model {model!r} (known: {', '.join(ALL_MODELS)})")
    if model == "local":
        from guardian_core.adapters.local import LocalGuardian

        guardian = LocalGuardian(deadline_seconds=BATCH_DEADLINE_SECONDS)
    elif model == "onnx":
        from runs.ports import onnx_guardian

        try:
            guardian = onnx_guardian(deadline_seconds=BATCH_DEADLINE_SECONDS)
        except ValueError as exc:
            raise EvaluationError(f"--model: the onnx guardian cannot be built: {exc}") from exc
    else:
        if policy_version is None:
            policy_version = policy_version_for_evaluation(None)
        try:
            guardian = base_guardian(Run(guardian=model, policy_version=policy_version, config={}))
        except (ValueError, KeyError) as exc:
            raise EvaluationError(f"--model: the {model} guardian cannot be built: {exc}") from exc
    if version is not None:
        from runs.guardian_models import versioned_guardian

        guardian = versioned_guardian(version, guardian, deadline_seconds=BATCH_DEADLINE_SECONDS)
    warm = getattr(guardian, "warm", None)
    if callable(warm):
        warm()
    scorer = GuardianScorer(guardian, model)
    return scorer, scorer.model_version


def _scoring_version(
    model: str | None, guardian_version: int | None, *, base: bool
) -> tuple[dict, int | None]:
    """Which guardian model version scores for `model` (see traces_evaluate) and the number to
    build it as (None: the adapter as it ships)."""
    adapter = model
    if guardian_version is not None and adapter is None:
        adapter = (
            GuardianModelVersion.objects.filter(number=guardian_version)
            .values_list("adapter", flat=True)
            .first()
        )
    active = (
        GuardianModelVersion.objects.filter(adapter=adapter, is_active=True)
        .values_list("number", flat=True)
        .first()
    )
    if guardian_version is not None:
        return {"number": guardian_version, "chosen": "named", "active": active}, guardian_version
    if base or active is None:
        return {"number": None, "chosen": "base", "active": active}, None
    # What a run on this adapter answers with now (runs/ports.py build_guardian).
    return {"number": active, "chosen": "active", "active": active}, active


def learnt_example_ids(version: GuardianModelVersion) -> set[int]:
    """The labelled examples `version` learnt from: its own (fitted on, or taught) and those of
    every version it stacks on (`over`: a map over a retrained model answers with what both
    learnt). Measured on them a version looks better than it is."""
    learnt: set[int] = set()
    seen: set[int] = set()
    current: GuardianModelVersion | None = version
    while current is not None and current.pk not in seen:  # a cycle cannot be made; still
        seen.add(current.pk)
        learnt.update(int(pk) for pk in current.example_ids or ())
        current = current.over
    return learnt


def score_rows(
    rows: Sequence[TraceRow],
    scorer: Scorer,
    *,
    rescore: bool = False,
    progress: Progress | None = None,
) -> list[TraceRow]:
    """`rows` with every row lacking a probability (every row, with `rescore`) scored by
    `scorer`. A failed batch leaves its rows unscored with the failure as the reason: the
    harness reports it rather than guessing a probability."""
    out = list(rows)
    wanted = [i for i, row in enumerate(out) if rescore or row.probability is None]
    done = 0
    if progress:
        progress(0, len(wanted))
    for condition in Condition:
        mine = [i for i in wanted if out[i].condition == condition]
        for start in range(0, len(mine), CHUNK):
            chunk = mine[start : start + CHUNK]
            answers = _ask(scorer, condition, [out[i].projection for i in chunk])
            for i, raw in zip(chunk, answers, strict=True):
                out[i] = with_answer(out[i], raw)
            done += len(chunk)
            if progress:
                progress(done, len(wanted))
    return out


def _ask(scorer: Scorer, condition: Condition, projections: list[Mapping]) -> list[object]:
    try:
        answers = scorer(condition, projections)
    except Exception as exc:  # a failed guardian: its rows are unscored, and say why
        failure = Malformed(f"guardian failed: {type(exc).__name__}: {exc}"[:300])
        return [failure] * len(projections)
    if isinstance(answers, Malformed):  # a batch past its deadline answers once, for all
        return [answers] * len(projections)
    if len(answers) != len(projections):
        return [Malformed("guardian gave a wrong number of answers")] * len(projections)
    return list(answers)


def traces_evaluate(
    *,
    lines: Iterable[str | bytes],
    model: str | None = None,
    policy_number: int | None = None,
    bins: int = DEFAULT_BINS,
    rescore: bool = False,
    progress: Progress | None = None,
    guardian_version: int | None = None,
    priced_at: int | None = None,
    base: bool = False,
) -> dict:
    """The harness's report of a trace set as a JSON-ready dict: the engine's report, the
    policy version it was measured at, and the model that scored rows (None when none did).

    `model` scores as its runs answer now: as its adapter's active guardian model version
    when one is active, else as it ships; with `base`, as it ships whatever is active; as
    guardian model version `guardian_version` when that is given. `guardian_model` says which
    ({"number", "chosen": "active" | "named" | "base", "active"}). Scored by a learnt version,
    the rows exported from the labelled examples it learnt from (learnt_example_ids) are left
    out: `left_out` says how many ({"version", "learnt_from", "rows"}; None when no learnt
    version scored). Expected costs are priced at
    policy version `priced_at`'s costs (the measured version's when None) and one review at
    GUARDIAN_REVIEW_COST_SHARE of the cheaper error."""
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise EvaluationError(f"--bins: must be an integer ≥ 1, got {bins!r}")
    if rescore and model is None and guardian_version is None:
        raise EvaluationError("--rescore needs --model: which guardian should score the rows?")
    if base and guardian_version is not None:
        raise EvaluationError(
            "--base scores the adapter as it ships; --guardian-version as a learnt version: "
            "choose one"
        )
    if base and model is None:
        raise EvaluationError("--base needs --model: which guardian should score as it ships?")
    version = policy_version_for_evaluation(policy_number)
    scorer, model_version, guardian_model = None, None, None
    if model is not None or guardian_version is not None:
        guardian_model, guardian_version = _scoring_version(model, guardian_version, base=base)
        scorer, model_version = guardian_scorer(
            model, guardian_version=guardian_version, policy_version=version
        )
        model = scorer.model
    parsed = parse_traces(lines)
    rows = parsed.rows
    left_out = None
    if guardian_model is not None and guardian_model["number"] is not None:
        # As the gate does: the examples the scoring version learnt from are not measured
        # (lines of this app's export carry example_id; other traces keep every row).
        learnt = learnt_example_ids(
            GuardianModelVersion.objects.get(number=guardian_model["number"])
        )
        kept = tuple(row for row in rows if row.example_id not in learnt)
        left_out = {
            "version": guardian_model["number"],
            "learnt_from": len(learnt),
            "rows": len(rows) - len(kept),
        }
        rows = kept
    if scorer is not None:
        try:
            rows = score_rows(rows, scorer, rescore=rescore, progress=progress)
        finally:
            scorer.close()
    prices = thresholds_of(policy_version_for_evaluation(priced_at)) if priced_at else None
    report = evaluate(
        parsed,
        thresholds_of(version),
        bins=bins,
        rows=rows,
        prices=prices,
        review_share=review_share(),
    ).as_dict()
    return {
        "policy_version": version.number,
        "priced_at": priced_at or version.number,
        "model": model,
        "model_version": model_version,
        "guardian_model": guardian_model,
        "rescored": rescore,
        "left_out": left_out,
        **report,
    }


def review_share() -> float:
    """A review's price as a share of the cheaper error (GUARDIAN_REVIEW_COST_SHARE)."""
    return float(settings.GUARDIAN_REVIEW_COST_SHARE)
