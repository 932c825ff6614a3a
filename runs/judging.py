"""The second-tier judge in the decision log: its answers stored beside the guardian's, read
back for a re-decision (replay, a reviewer's answers), its settled answers kept as labelled
examples, and each judgement in words for the run page.

A decision's `answers` hold the guardian's raw answers per condition and, when the judge was
asked, one more key: {"judge": {"model_version", "question_set_version", "answers": {condition:
raw}, "settled": [conditions]}}. `decide` ignores keys that are not conditions, so a reader that
knows nothing of the judge still sees the guardian's answers; `settled` is for people: a
re-decision derives it again from the two answers (engine/judge.py).
"""

from collections.abc import Mapping

from django.utils.translation import gettext as _

from escalations.models import ExampleSelection, ExampleSource, LabelledExample
from guardian_core.engine.conditions import (
    DRIFT_MISALIGNED_MAX_SCORE,
    Condition,
    DriftDistribution,
    Malformed,
    compared_probability,
    parse_answer,
)
from guardian_core.engine.judge import judgements
from guardian_core.engine.loop import TurnRecord
from guardian_core.engine.thresholds import Policy
from runs import mapping
from runs.models import Run

JUDGE_KEY = "judge"


def answers_logged(record: TurnRecord, run: Run) -> dict:
    """The decision's `answers`: the guardian's, and the judge's when it was asked (only
    then is the run's policy version read)."""
    answers = mapping.answers_to_json(record.answers)
    if record.judged:
        policy = mapping.policy_for_run(run)
        settled = [j.condition.value for j in _judgements(record, policy) if j.settled]
        answers[JUDGE_KEY] = {
            "model_version": record.judge_model_version,
            "question_set_version": run.policy_version.question_set_version,
            "answers": mapping.answers_to_json(record.judged),
            "settled": settled,
        }
    return answers


def answers_split(logged: Mapping) -> tuple[dict, dict]:
    """(the guardian's answers, the judge's answers) of a decision's logged `answers`, each
    as `decide_judged` takes them (a logged malformed answer is Malformed again)."""
    guardian = {key: _decoded(value) for key, value in logged.items() if key != JUDGE_KEY}
    entry = logged.get(JUDGE_KEY)
    judged = entry.get("answers") if isinstance(entry, Mapping) else None
    if not isinstance(judged, Mapping):
        return guardian, {}
    return guardian, {str(key): _decoded(value) for key, value in judged.items()}


def judge_examples_record(*, run: Run, record: TurnRecord, policy: Policy) -> int:
    """A labelled example (source judge) per condition the judge settled on this turn: the
    projection both were shown, the judge's probability and its confident side as the label.
    Selected `escalated`: the judge labels what the policy's band raised, as a reviewer would.
    Returns how many were written."""
    entry_version = run.policy_version.question_set_version
    written = 0
    for judgement in _judgements(record, policy):
        if not judgement.settled:
            continue
        condition = judgement.condition
        answer = parse_answer(condition, judgement.judge)
        probability = compared_probability(condition, answer)
        fired = probability > policy.thresholds[condition].t_star
        LabelledExample.objects.create(
            condition=condition.value,
            projection=record.guardian_projection or {},
            probability=probability,
            label=_label(condition, answer, fired),
            source=ExampleSource.JUDGE,
            selection=ExampleSelection.ESCALATED,
            question_set_version=entry_version,
            model_version=record.judge_model_version,
            policy_version=run.policy_version,
        )
        written += 1
    return written


def judge_lines(logged: object) -> list[dict]:
    """Each judged condition of a decision, for the run page: the condition, the guardian's
    and the judge's probability, and what came of it in words ("Judge: 0.03 — settled")."""
    if not isinstance(logged, Mapping) or not isinstance(logged.get(JUDGE_KEY), Mapping):
        return []
    entry = logged[JUDGE_KEY]
    judged = entry.get("answers") if isinstance(entry.get("answers"), Mapping) else {}
    settled = set(entry.get("settled") or [])
    lines = []
    for name, raw in judged.items():
        try:
            condition = Condition(name)
        except ValueError:
            continue
        guardian_p = compared_probability(condition, parse_answer(condition, logged.get(name)))
        judge_p = compared_probability(condition, parse_answer(condition, _decoded(raw)))
        # Words for the run page (runs/timeline.py), in the active language.
        if name in settled:
            words = _("Judge: %(p)s — settled") % {"p": f"{judge_p:.2f}"}
        elif judge_p is None:
            words = _("Judge: no usable answer — to a person")
        else:
            words = _("Judge: uncertain (%(p)s) — to a person") % {"p": f"{judge_p:.2f}"}
        lines.append(
            {
                "condition": name,
                "guardian": _("no usable answer") if guardian_p is None else f"{guardian_p:.2f}",
                "words": words,
                "settled": name in settled,
                "model_version": str(entry.get("model_version") or ""),
            }
        )
    return lines


def _judgements(record: TurnRecord, policy: Policy):
    return judgements(record.answers, record.judged, policy)


def _label(condition: Condition, answer, fired: bool) -> object:
    """The judge's confident side as a trace label: yes/no, or for drift the judge's most
    likely score on that side of the misaligned line."""
    if isinstance(answer, DriftDistribution):
        side = [s for s in answer.probabilities if (s <= DRIFT_MISALIGNED_MAX_SCORE) == fired]
        return max(side, key=lambda s: (answer.probabilities[s], -s))
    return fired


def _decoded(value: object) -> object:
    if isinstance(value, dict) and len(value) == 1 and "malformed" in value:
        return Malformed(str(value["malformed"]))
    return value
