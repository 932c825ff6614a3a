"""Labelled examples: those a verdict becomes, imported traces, the export, reviewer stats."""

import json
import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from itertools import batched

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from escalations.held_calls import approval_edits
from escalations.models import (
    PEOPLES_SOURCES,
    Approval,
    Escalation,
    EscalationKind,
    ExampleSelection,
    ExampleSource,
    LabelledExample,
    Verdict,
    VerdictDecision,
)
from guardian_core.engine.canonical import sha256_hex
from guardian_core.engine.conditions import (
    DRIFT_MISALIGNED_MAX_SCORE,
    Condition,
    compared_probability,
    most_likely_risk,
    parse_answer,
)
from guardian_core.engine.evaluation import LineProblem, is_positive, parse_traces
from runs.models import Turn

# ---- the examples a verdict becomes ----------------------------------------------------------


def labelled_examples_create(*, escalation: Escalation, verdict: Verdict) -> None:
    """Store the labelled examples a verdict becomes (in the verdict's transaction): for a
    held step, one risk example per held call; for a coder/reviewer loop, whether the goal is
    reached; and one per condition the reviewer answered. Selected as `audit_sample` when the
    escalation is one (a turn drawn from the traffic), else `escalated`."""
    turn = escalation.turn
    decision = turn.decision
    common = {
        "source": ExampleSource.HUMAN,
        "selection": ExampleSelection.AUDIT_SAMPLE
        if escalation.kind == EscalationKind.AUDIT_SAMPLE
        else ExampleSelection.ESCALATED,
        "question_set_version": decision.question_set_version,
        "model_version": decision.guardian_model_version,
        "policy_version": escalation.run.policy_version,
        "verdict": verdict,
        "labelled_by": verdict.reviewer,
    }
    if escalation.kind == EscalationKind.GATED_STEP:
        # The label is the reviewer's own class for the call when they gave one (their
        # judgement), else the class the call was held at, which they saw and let stand. The
        # example holds the projection the guardian judged that call on.
        shown = turn.risk_projections or []
        given = verdict.risk_labels or {}
        for call in turn.tool_calls.filter(position__in=escalation.reason.get("held_calls", [])):
            raw = (decision.risk_answers or [None] * (call.position + 1))[call.position]
            LabelledExample.objects.create(
                condition=Condition.RISK,
                projection=shown[call.position] if call.position < len(shown) else {},
                probability=compared_probability(Condition.RISK, parse_answer(Condition.RISK, raw)),
                label=given.get(str(call.position), call.risk_class),
                **common,
            )
    if escalation.kind == EscalationKind.REVIEW_LOOP:
        # Accepting the coder's last code says the goal is reached; rejecting it says not. The
        # example holds what the person judged: the goal, the code and the reviewer's reasons.
        LabelledExample.objects.create(
            condition=Condition.GOAL_REACHED,
            projection=turn.projection
            or {
                "goal": escalation.run.goal,
                "last_code": escalation.reason.get("last_code", ""),
                "last_reasons": escalation.reason.get("last_reasons", []),
            },
            probability=None,
            label=verdict.decision == VerdictDecision.APPROVE,
            **common,
        )
    for condition, label in (verdict.answer or {}).items():
        raw = decision.answers.get(condition)
        LabelledExample.objects.create(
            condition=condition,
            projection=turn.projection,
            probability=compared_probability(
                Condition(condition), parse_answer(Condition(condition), raw)
            ),
            label=label,
            **common,
        )


# ---- importing labelled traces ------------------------------------------------------------
# A trace file (JSON Lines, the trace format of DESIGN.md) becomes labelled examples with
# source `import` and the line's `selection` (`imported` when it names none): checked line by
# line as `manage.py evaluate` checks them, stored all or nothing, never twice.
#
# A line becomes an example with the compared probability the trace gives (absent: unscored),
# its label, and its `question_set` and `model` as the versions it was labelled under (empty when
# the trace names none). The app's own export (`manage.py export_examples`) reads back as is:
# the fields only the export has (reviewer, ids, verdict...) are kept out, as the format says.
#
# "Never twice": an example's content hash is the SHA-256 of its condition, projection, label,
# probability, question set and model. A line whose hash any stored labelled example already has,
# whatever its source, or an earlier line of the same file had, is counted as a duplicate and not
# stored: an export of this database read back into it adds nothing, so no verdict is counted
# twice when a model is trained or recalibrated. No column holds the hash (the examples table is
# not this module's to change): it is computed over the stored examples of the file's conditions
# at each import, under a lock that makes two imports at once queue up.

# The examples table's column widths: a longer version name is a malformed line, not a crash.
MAX_QUESTION_SET_CHARS = LabelledExample._meta.get_field("question_set_version").max_length
MAX_MODEL_CHARS = LabelledExample._meta.get_field("model_version").max_length
# Any constant key: only imports take this transaction-scoped advisory lock.
_IMPORT_LOCK = 0x6578_696D  # "exim"
_BATCH = 1000


class ExamplesImportError(ValueError):
    """The file is refused: `problems` lists every malformed line (by line number) or why the
    file as a whole cannot be imported. Nothing was stored."""

    def __init__(self, problems: list[LineProblem | str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problem_text(p) for p in problems))


def problem_text(problem: LineProblem | str) -> str:
    """A problem as a person reads it: "line 3: label: missing", or the file's own."""
    return f"line {problem.line}: {problem.why}" if isinstance(problem, LineProblem) else problem


@dataclass(frozen=True)
class ExamplesImport:
    """What an import did (or, dry, would do): lines read, examples stored, duplicates not
    stored (of earlier imports or earlier lines), blank lines, and per condition how many."""

    lines: int
    imported: int
    duplicates: int
    blank_lines: int
    dry_run: bool
    by_condition: dict[str, int] = field(default_factory=dict)
    example_ids: tuple[int, ...] = ()


def examples_import(*, lines: Iterable[str | bytes], dry_run: bool = False) -> ExamplesImport:
    """Store every line of a trace file as a labelled example with source `import`.

    Raises ExamplesImportError, storing nothing, when any line is malformed (all of them are
    listed, each with every problem) or the file holds no example. With `dry_run` everything
    is checked and counted, duplicates included, and nothing is stored."""
    lines = list(lines)
    parsed = parse_traces(lines)
    problems: list[LineProblem | str] = list(parsed.malformed)
    candidates = []
    for row in parsed.rows:
        data = json.loads(_text(lines[row.line - 1]))
        versions, why = _versions(data)
        if why:
            problems.append(LineProblem(row.line, "; ".join(why)))
            continue
        candidates.append(
            {
                "condition": row.condition.value,
                "projection": row.projection,
                "label": row.label,
                "probability": row.probability,
                "selection": row.selection,
                **versions,
            }
        )
    if problems:
        raise ExamplesImportError(sorted(problems, key=lambda p: p.line))
    if not candidates:
        raise ExamplesImportError(["the file holds no example (every line is blank)"])
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_IMPORT_LOCK])
        seen = _stored_hashes({c["condition"] for c in candidates})
        new = []
        for candidate in candidates:
            digest = example_hash(candidate)
            if digest not in seen:
                seen.add(digest)
                new.append(candidate)
        by_condition: dict[str, int] = {}
        for candidate in new:
            by_condition[candidate["condition"]] = by_condition.get(candidate["condition"], 0) + 1
        ids: tuple[int, ...] = ()
        if not dry_run:
            created = LabelledExample.objects.bulk_create(
                [
                    LabelledExample(
                        condition=c["condition"],
                        projection=c["projection"],
                        label=c["label"],
                        probability=c["probability"],
                        question_set_version=c["question_set"],
                        model_version=c["model"],
                        source=ExampleSource.IMPORT,
                        selection=c["selection"],
                    )
                    for c in new
                ],
                batch_size=_BATCH,
            )
            ids = tuple(example.pk for example in created)
    return ExamplesImport(
        lines=parsed.lines,
        imported=len(new),
        duplicates=len(candidates) - len(new),
        blank_lines=parsed.blank_lines,
        dry_run=dry_run,
        by_condition=by_condition,
        example_ids=ids,
    )


def example_hash(example: dict) -> str:
    """The content hash that makes a re-imported line a duplicate (see the module)."""
    return sha256_hex(
        [
            example["condition"],
            _as_stored(example["projection"]),
            example["label"],
            example["probability"],
            example["question_set"],
            example["model"],
        ]
    )


def _as_stored(value: object) -> object:
    """`value` as PostgreSQL's jsonb gives it back: a float with no fraction (1e2) returns as
    the integer 100, so the hash of a line and of its stored example must not tell them apart."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _as_stored(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_stored(item) for item in value]
    return value


def _stored_hashes(conditions: set[str]) -> set[str]:
    # Every source: a verdict exported and imported back is the same example, not a new one.
    rows = LabelledExample.objects.filter(condition__in=conditions).values_list(
        "condition", "projection", "label", "probability", "question_set_version", "model_version"
    )
    return {
        example_hash(
            {
                "condition": condition,
                "projection": projection,
                "label": label,
                "probability": probability,
                "question_set": question_set,
                "model": model,
            }
        )
        for condition, projection, label, probability, question_set, model in rows.iterator(
            chunk_size=_BATCH
        )
    }


def _versions(data: dict) -> tuple[dict, list[str]]:
    """The trace's question set and model as the example's versions, or what is wrong."""
    out, problems = {}, []
    for key, limit in (("question_set", MAX_QUESTION_SET_CHARS), ("model", MAX_MODEL_CHARS)):
        value = data.get(key)
        if value is None:
            out[key] = ""
        elif not isinstance(value, str):
            problems.append(f"{key}: must be text")
        elif len(value) > limit:
            problems.append(f"{key}: longer than {limit} characters")
        else:
            out[key] = value
    return out, problems


def _text(line: str | bytes) -> str:
    # parse_traces has already decoded every valid line once: this cannot fail here.
    return line.decode("utf-8") if isinstance(line, bytes) else line


# ---- the JSON Lines export and a reviewer's own stats ----------------------------------------

# A reviewer's median time and agreement are taken over their latest decisions, so the
# stats cost the same for a reviewer of ten years as for one of a day.
STATS_WINDOW = 200
_EXPORT_CHUNK = 2000


@dataclass(frozen=True)
class ExampleFilters:
    condition: str = ""  # a Condition value or ""
    since: date | None = None  # from this local date on
    until: date | None = None  # up to this local date, inclusive
    source: str = ""  # an ExampleSource value or ""

    def as_params(self) -> dict[str, str]:
        """The filters set, as query parameters (the export link of the page)."""
        params = {
            "condition": self.condition,
            "since": self.since.isoformat() if self.since else "",
            "until": self.until.isoformat() if self.until else "",
            "source": self.source,
        }
        return {key: value for key, value in params.items() if value}


EXAMPLE_FILTER_FIELDS = ("condition", "since", "until", "source")


def example_filters_from(params: Mapping) -> tuple[ExampleFilters, dict[str, str]]:
    """The export's filters from a query string or a command line, and a problem per bad field
    (field name -> message); the filters hold only the good fields."""
    problems: dict[str, str] = {}
    condition = (params.get("condition") or "").strip()
    if condition and condition not in {c.value for c in Condition}:
        problems["condition"] = (
            _("%(given)r is not one of %(values)s")
            % {"given": condition, "values": ", ".join(Condition)}
        )[:300]
        condition = ""
    source = (params.get("source") or "").strip()
    if source and source not in ExampleSource.values:
        problems["source"] = (
            _("%(given)r is not one of %(values)s")
            % {"given": source, "values": ", ".join(ExampleSource.values)}
        )[:300]
        source = ""
    dates: dict[str, date | None] = {}
    for name in ("since", "until"):
        raw = (params.get(name) or "").strip()
        dates[name] = _date_or_none(raw)
        if raw and dates[name] is None:
            problems[name] = (_("%(given)r is not a date like 2026-03-31") % {"given": raw})[:300]
        elif dates[name] and not 1900 <= dates[name].year <= 9000:
            # Beyond these, local midnight and the day after may not exist as datetimes.
            problems[name] = _("%(given)s is out of range (years 1900 to 9000)") % {"given": raw}
            dates[name] = None
    if dates["since"] and dates["until"] and dates["since"] > dates["until"]:
        problems["until"] = _("%(until)s is before since (%(since)s)") % {
            "until": dates["until"],
            "since": dates["since"],
        }
    filters = ExampleFilters(
        condition=condition, since=dates["since"], until=dates["until"], source=source
    )
    return filters, problems


def _date_or_none(raw: str) -> date | None:
    # Only YYYY-MM-DD: fromisoformat also takes 20260331 and week dates, which read as typos.
    if len(raw) != 10:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        return None


def _local_midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def _examples(
    condition: str = "",
    since: date | datetime | None = None,
    until: date | datetime | None = None,
    source: str = "",
) -> QuerySet[LabelledExample]:
    examples = LabelledExample.objects.all()
    if condition:
        examples = examples.filter(condition=condition)
    if source:
        examples = examples.filter(source=source)
    if isinstance(since, datetime):
        examples = examples.filter(created_at__gte=since)
    elif since is not None:
        examples = examples.filter(created_at__gte=_local_midnight(since))
    if isinstance(until, datetime):
        examples = examples.filter(created_at__lt=until)
    elif until is not None:
        examples = examples.filter(created_at__lt=_local_midnight(until + timedelta(days=1)))
    return examples


def labelled_example_ids(filters: ExampleFilters) -> QuerySet:
    """The ids of the examples matching the filters, newest first (the API pages through them)."""
    return (
        _examples(filters.condition, filters.since, filters.until, filters.source)
        .order_by("-id")
        .values_list("id", flat=True)
    )


def labelled_examples_count(filters: ExampleFilters) -> int:
    return _examples(filters.condition, filters.since, filters.until, filters.source).count()


def labelled_examples_export(
    *,
    condition: str = "",
    since: date | datetime | None = None,
    until: date | datetime | None = None,
    source: str = "",
    example_ids: list[int] | None = None,
) -> Iterator[dict]:
    """Labelled examples (only `example_ids` when given: a page of the API's list), oldest
    first, one dict each in the trace format of DESIGN.md
    (condition, projection, probability when scored, label, source, selection, question_set,
    model) and
    what a trace needs to be traced back: the reviewer's username, seconds_to_decide of their
    verdict, the policy version number, created_at (ISO 8601, UTC), the example's,
    escalation's, run's and turn's ids, and the verdict (its id, decision, reason and the
    escalation's kind); null for an imported or judged example.

    `since` and `until` are local dates (both inclusive) or aware datetimes (until exclusive).
    Rows are streamed from a server-side cursor: memory stays flat however many there are.
    """
    examples = _examples(condition, since, until, source)
    if example_ids is not None:
        examples = examples.filter(pk__in=example_ids)
    rows = examples.order_by("id").values_list(
        "id",
        "condition",
        "projection",
        "probability",
        "label",
        "source",
        "question_set_version",
        "model_version",
        "labelled_by__username",
        "verdict__seconds_to_decide",
        "policy_version__number",
        "created_at",
        "verdict__escalation_id",
        "verdict__escalation__run_id",
        "verdict__escalation__turn_id",
        "verdict_id",
        "verdict__decision",
        "verdict__reason",
        "verdict__escalation__kind",
        "verdict__approved_calls",
        "selection",
    )
    for chunk in batched(rows.iterator(chunk_size=_EXPORT_CHUNK), _EXPORT_CHUNK):
        # The calls reviewers edited before approving, for this chunk's verdicts: one query
        # a chunk, only approvals that were edited.
        edited: dict[int, list[Approval]] = {}
        escalation_ids = {row[12] for row in chunk if row[15] is not None}
        for approval in Approval.objects.filter(
            escalation_id__in=escalation_ids, original_arguments__isnull=False
        ).select_related("reviewer"):
            edited.setdefault(approval.escalation_id, []).append(approval)
        yield from _export_rows(chunk, edited)


def _export_rows(chunk: tuple, edited: dict[int, list[Approval]]) -> Iterator[dict]:
    for (
        pk,
        condition_,
        projection,
        probability,
        label,
        source_,
        question_set,
        model,
        reviewer,
        seconds,
        policy,
        created_at,
        escalation_id,
        run_id,
        turn_id,
        verdict_id,
        decision,
        reason,
        kind,
        approved_calls,
        selection,
    ) in chunk:
        example = {"condition": condition_, "projection": projection}
        # The trace format leaves probability out when the guardian gave none to compare.
        if probability is not None:
            example["probability"] = probability
        example.update(
            {
                "label": label,
                "source": source_,
                "selection": selection,
                "question_set": question_set,
                "model": model,
                "reviewer": reviewer,
                "seconds_to_decide": seconds,
                "policy_version": policy,
                "created_at": created_at.astimezone(UTC).isoformat(),
                "example_id": pk,
                "escalation_id": escalation_id,
                "run_id": run_id,
                "turn_id": turn_id,
                # The verdict the label came from: approve / reject / answer, and why.
                # edited_arguments: each approved call the reviewer edited before approving
                # it, with the change list ("approved with edited arguments: amount 49.9 →
                # 39.9"); [] when none was.
                "verdict": None
                if verdict_id is None
                else {
                    "id": verdict_id,
                    "decision": decision,
                    "reason": reason,
                    "kind": kind,
                    "edited_arguments": [
                        edit
                        for edit in approval_edits(edited.get(escalation_id, []))
                        if edit["position"] in (approved_calls or [])
                    ],
                },
            }
        )
        yield example


def labelled_examples_jsonl(filters: ExampleFilters) -> Iterator[str]:
    """The export as JSON Lines, one line per example: what the page's download and
    `manage.py export_examples` both write, byte for byte."""
    for example in labelled_examples_export(
        condition=filters.condition,
        since=filters.since,
        until=filters.until,
        source=filters.source,
    ):
        yield json.dumps(example, separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class ReviewerStats:
    decided_today: int
    median_seconds_to_decide: float | None
    agreement: float | None
    labelled: int
    compared: int = 0  # how many examples the agreement was measured on

    @property
    def agreement_percent(self) -> int | None:
        return None if self.agreement is None else round(self.agreement * 100)


def reviewer_stats(reviewer: AbstractBaseUser) -> ReviewerStats:
    """A reviewer's own figures.

    decided_today: their verdicts since local midnight (TIME_ZONE).
    median_seconds_to_decide: the median of Verdict.seconds_to_decide over their latest
      STATS_WINDOW verdicts that have it; None when none has.
    agreement: over their latest STATS_WINDOW human labelled examples that carry the
      guardian's probability, the share where the guardian and the reviewer said the same:
      for a yes/no condition, the probability lies on the label's side of 0.5 (above for yes,
      below for no; exactly 0.5 took no side and counts as a disagreement); for risk, the
      guardian's most likely class is the reviewer's class; for drift, the guardian's
      P(score ≤ 1) is above 0.5 exactly when the reviewer's score is 1 or less. None when no
      example can be compared.
    labelled: every human labelled example they gave.
    """
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    verdicts = Verdict.objects.filter(reviewer=reviewer)
    decided_today = verdicts.filter(created_at__gte=today).count()
    seconds = list(
        verdicts.filter(seconds_to_decide__isnull=False)
        .order_by("-created_at", "-id")
        .values_list("seconds_to_decide", flat=True)[:STATS_WINDOW]
    )
    mine = LabelledExample.objects.filter(labelled_by=reviewer, source=ExampleSource.HUMAN)
    window = list(
        mine.filter(probability__isnull=False)
        .order_by("-id")
        .values_list("id", "condition", "probability", "label")[:STATS_WINDOW]
    )
    risk_classes = _guardian_risk_classes([pk for pk, c, _p, _l in window if c == Condition.RISK])
    agreed = compared = 0
    for pk, condition, probability, label in window:
        verdict = _agrees(condition, probability, label, risk_classes.get(pk))
        if verdict is not None:
            compared += 1
            agreed += verdict
    return ReviewerStats(
        decided_today=decided_today,
        median_seconds_to_decide=statistics.median(seconds) if seconds else None,
        agreement=agreed / compared if compared else None,
        labelled=mine.count(),
        compared=compared,
    )


def _agrees(condition: str, probability: float, label: object, risk_class: str | None):
    """True or False when the guardian's answer and the label can be compared, else None."""
    if condition == Condition.RISK:
        return None if risk_class is None else risk_class == label
    if condition == Condition.DRIFT:
        if isinstance(label, bool) or not isinstance(label, int):
            return None
        return (probability > 0.5) == (label <= DRIFT_MISALIGNED_MAX_SCORE)
    if not isinstance(label, bool):
        return None
    return probability > 0.5 if label else probability < 0.5


def _guardian_risk_classes(example_ids: list[int]) -> dict[int, str]:
    """The guardian's most likely class for each risk example: its turn's risk answer for the
    call whose projection the example holds (an example does not store the call's position)."""
    if not example_ids:
        return {}
    rows = list(
        LabelledExample.objects.filter(pk__in=example_ids).values_list(
            "id", "projection", "verdict__escalation__turn_id"
        )
    )
    # One read per turn, not per example: a held step's examples share their turn.
    turns = {
        pk: (shown or [], answers or [])
        for pk, shown, answers in Turn.objects.filter(
            pk__in={turn_id for _e, _c, turn_id in rows if turn_id is not None}
        ).values_list("pk", "risk_projections", "decision__risk_answers")
    }
    classes = {}
    for pk, projection, turn_id in rows:
        shown, answers = turns.get(turn_id, ([], []))
        for position, seen in enumerate(shown):
            if seen == projection and position < len(answers):
                likely = most_likely_risk(parse_answer(Condition.RISK, answers[position]))
                if likely is not None:
                    classes[pk] = likely.value
                break
    return classes


# ---- what the audit samples say about the traffic --------------------------------------------


def audit_sample_counts(condition: str | Condition) -> tuple[int, int]:
    """(positives, n) over the audit-sample examples of `condition` that people labelled
    (PEOPLES_SOURCES): n labels of turns drawn at random from those that went on, `positives`
    of them the class that makes the condition fire (engine.evaluation.is_positive: true, an
    irreversible or regulated class, a drift score ≤ 1). The one unbiased count of the live
    prior among non-escalated turns, and of what the guardian let through.

    A drawn turn asks about one of the k conditions its guardian answered, picked evenly
    (escalations/audit_samples.py), so a turn's chance to give `condition` a label is the
    share over k: unweighted counts are unbiased while the turns answer the same conditions
    (one question set); each item's reason records k (`audit.answered`) for a weighted
    estimate otherwise. A label that is not one of the condition's is not counted."""
    condition = Condition(condition)
    labels = LabelledExample.objects.filter(
        selection=ExampleSelection.AUDIT_SAMPLE,
        condition=condition.value,
        source__in=PEOPLES_SOURCES,
    ).values_list("label", flat=True)
    positives = n = 0
    for label in labels.iterator(chunk_size=_BATCH):
        try:
            positive = is_positive(condition, label)
        except (TypeError, ValueError):
            continue
        n += 1
        positives += bool(positive)
    return positives, n
