"""Services of the tamper-evident decision log: verify a run's hash chain, export a run as
one JSON document (and its decisions as CSV), import such a document, purge a run."""

import csv
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.contrib.auth import get_user_model
from django.db import models, transaction
from django.db.models import Prefetch
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThan

from escalations.held_calls import approval_edits
from escalations.models import (
    Approval,
    Escalation,
    EscalationKind,
    ExampleSelection,
    LabelledExample,
    Verdict,
)
from guardian_core import metrics
from guardian_core.models import PolicyVersion
from runs.chain import HASHED_FIELDS, ChainReport
from runs.log_triggers import log_purge
from runs.models import Decision, Run, ToolCall, Turn
from runs.sealing import run_log_check
from runs.selectors import RunFilters, run_list_queryset

EXPORT_FORMAT = "guardian-run/1"


# ---- verify ----------------------------------------------------------------------------------


def run_chain_verify(run: Run) -> ChainReport:
    """Check the run's keyed log (runs/chain.py): every decision's seal over the story it
    rests on and its link to the one before, the run's seal over what came after its last
    decision, and its status against that decision. The report names every problem with its
    turn. Reads the decisions in chunks."""
    report = run_log_check(run.pk)
    if report is None:
        return ChainReport(run.pk, str(run.uid), 0, "", ((None, "the run is not there"),))
    if not report.ok:
        metrics.CHAIN_VERIFY_FAILURES.inc()
    return report


def runs_chain_verify(runs: Iterable[Run]) -> Iterator[ChainReport]:
    for run in runs:
        yield run_chain_verify(run)


def run_chain_head(run: Run) -> str:
    """The last decision's hash: what an auditor writes down to compare against later."""
    head = (
        Decision.objects.filter(turn__run_id=run.pk)
        .order_by("-turn__index")
        .values_list("content_hash", flat=True)
        .first()
    )
    return head or ""


# ---- purge -----------------------------------------------------------------------------------


def run_purge(*, run_id: int, reason: str = "", actor: str = "") -> bool:
    """Delete a run and everything on it (an operator's purge): the only way its decisions,
    verdicts and labelled examples can go. `reason` and `actor` (who asked) go into the purge
    log (runs/log_triggers.py). False if there was no such run."""
    from escalations.models import LabelledExample

    with log_purge(reason=reason or f"purge of run {run_id}", actor=actor):
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            return False
        # A labelled example protects its verdict from deletion: the purge takes them first.
        LabelledExample.objects.filter(verdict__escalation__run_id=run_id).delete()
        run.delete()
    return True


# ---- export ----------------------------------------------------------------------------------


def _plain(instance: models.Model, skip: tuple[str, ...] = ()) -> dict:
    """The row's own columns as JSON values (no id, no foreign keys)."""
    data = {}
    for field in instance._meta.concrete_fields:
        if field.primary_key or field.is_relation or field.name in skip:
            continue
        value = field.value_from_object(instance)
        if isinstance(field, models.JSONField):
            data[field.name] = value
        elif value is None:
            data[field.name] = None
        elif isinstance(field, models.DateTimeField):
            data[field.name] = value.isoformat()
        elif isinstance(field, models.UUIDField):
            data[field.name] = str(value)
        else:
            data[field.name] = value
    return data


def _username(user) -> str | None:
    return user.get_username() if user is not None else None


def run_export(run: Run) -> dict:
    """The run as one JSON document: the run, its policy version, its turns with their calls
    and decisions (hashes included), its escalations with their verdicts, and the chain's
    head. Ids are left out: the hashes do not depend on them."""
    version = run.policy_version
    turns = []
    calls_by_turn: dict[int, list] = {}
    for call in ToolCall.objects.filter(turn__run=run).order_by("turn__index", "position"):
        calls_by_turn.setdefault(call.turn_id, []).append(_plain(call))
    decisions = {d.turn_id: d for d in Decision.objects.filter(turn__run=run)}
    for turn in run.turns.order_by("index"):
        decision = decisions.get(turn.pk)
        turns.append(
            {
                **_plain(turn),
                "tool_calls": calls_by_turn.get(turn.pk, []),
                "decision": _plain(decision) if decision else None,
            }
        )
    escalations = []
    for escalation in (
        Escalation.objects.filter(run=run)
        .select_related("turn", "claimed_by", "verdict__reviewer")
        .prefetch_related(
            Prefetch(
                "approvals",
                queryset=Approval.objects.select_related("reviewer", "used_on_turn").order_by("id"),
            )
        )
        .order_by("id")
    ):
        verdict = getattr(escalation, "verdict", None)
        approvals = list(escalation.approvals.all())
        escalations.append(
            {
                **_plain(escalation),
                "turn_index": escalation.turn.index,
                "claimed_by": _username(escalation.claimed_by),
                # Each approval as given: the arguments approved and, when the reviewer
                # edited them, the proposed ones (original_arguments) and what changed.
                "approvals": [
                    {
                        **_plain(approval),
                        "reviewer": _username(approval.reviewer),
                        "changes": next((e["changes"] for e in approval_edits([approval])), []),
                        "used_on_turn": approval.used_on_turn.index
                        if approval.used_on_turn
                        else None,
                    }
                    for approval in approvals
                ],
                "verdict": (
                    {
                        **_plain(verdict),
                        "reviewer": _username(verdict.reviewer),
                        # "approved with edited arguments: amount 49.9 → 39.9" per call
                        # that ran with arguments a reviewer changed.
                        "edited_arguments": [
                            edit
                            for edit in approval_edits(approvals)
                            if edit["position"] in (verdict.approved_calls or [])
                        ],
                        # The labelled examples a verdict became: sealed with the run's story.
                        "examples": [
                            {
                                **_plain(example),
                                "policy_version": example.policy_version.number
                                if example.policy_version
                                else None,
                                "labelled_by": _username(example.labelled_by),
                            }
                            for example in verdict.examples.select_related(
                                "policy_version", "labelled_by"
                            ).order_by("id")
                        ],
                    }
                    if verdict
                    else None
                ),
            }
        )
    return {
        "format": EXPORT_FORMAT,
        # The run's seal travels with it: an installation holding the same log key (or it
        # among GUARDIAN_LOG_OLD_KEYS) verifies the document as this one does.
        "run": {**_plain(run, skip=("lease_token", "lease_expires_at")),
                "created_by": _username(run.created_by)},
        "policy_version": _plain(version, skip=("is_active",)),
        "turns": turns,
        "escalations": escalations,
        "head_hash": run_chain_head(run),
    }  # fmt: skip


def run_export_text(run: Run) -> str:
    """The run's JSON document as the page, the API and `manage.py export_run` write it."""
    return json.dumps(run_export(run), ensure_ascii=False, indent=1)


CSV_COLUMNS = ("run_id", "run_uid", "turn", "created_at", "policy_version", *HASHED_FIELDS,
               "content_hash")  # fmt: skip
# Decisions read per query of the CSV export: its memory is this many rows at any log length.
CSV_BATCH = 500


def decision_csv_rows(
    *, run_id: int | None = None, filters: RunFilters | None = None, batch: int | None = None
) -> Iterator[list]:
    """The decision log as CSV rows, the header first: one run's decisions, or those of every
    run the runs list's filters match, run by run (by id) and in chain order within a run, so
    a reader can check each run's links from the file alone. Read by keyset over
    (run, turn index), `batch` decisions a query: one seek per batch on the turns'
    (run, index) index, never an OFFSET, never the whole log in memory. JSON columns are
    canonical JSON, as the hash sees them."""
    from guardian_core.engine.canonical import canonical_json

    batch = batch or CSV_BATCH
    decisions = Decision.objects.all()
    if run_id is not None:
        decisions = decisions.filter(turn__run_id=run_id)
    if filters is not None:
        decisions = decisions.filter(turn__run__in=run_list_queryset(filters=filters))
    rows = decisions.values(
        "created_at",
        "content_hash",
        *HASHED_FIELDS,
        run=models.F("turn__run_id"),
        run_uid=models.F("turn__run__uid"),
        turn_index=models.F("turn__index"),
        policy_number=models.F("policy_version__number"),
    ).order_by("turn__run_id", "turn__index")
    key = Tuple(models.F("turn__run_id"), models.F("turn__index"))
    yield list(CSV_COLUMNS)
    last = None
    while True:
        page = rows if last is None else rows.filter(TupleGreaterThan(key, last))
        chunk = list(page[:batch])
        for row in chunk:
            values = [row["run"], str(row["run_uid"]), row["turn_index"],
                      row["created_at"].isoformat(), row["policy_number"]]  # fmt: skip
            for name in (*HASHED_FIELDS, "content_hash"):
                value = row[name]
                values.append(value if isinstance(value, str) else canonical_json(value))
            yield values
        if len(chunk) < batch:
            return
        last = (chunk[-1]["run"], chunk[-1]["turn_index"])


class _Line:
    """A file-like object whose write returns what it was given: csv.writer then formats one
    row at a time for a streamed response."""

    def write(self, text: str) -> str:
        return text


def decision_csv_lines(
    *, run_id: int | None = None, filters: RunFilters | None = None
) -> Iterator[str]:
    """decision_csv_rows as CSV text, a line at a time: what the pages and the API stream."""
    writer = csv.writer(_Line())
    for row in decision_csv_rows(run_id=run_id, filters=filters):
        yield writer.writerow(row)


# ---- import ----------------------------------------------------------------------------------


class ImportProblem(ValueError):
    """The document cannot be imported; the message says why."""


@contextmanager
def _keeping_timestamps(*model_classes):
    """Write the document's created/updated times instead of now while importing."""
    changed = []
    for model in model_classes:
        for field in model._meta.concrete_fields:
            if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
                changed.append((field, field.auto_now, field.auto_now_add))
                field.auto_now = field.auto_now_add = False
    try:
        yield
    finally:
        for field, auto_now, auto_now_add in changed:
            field.auto_now, field.auto_now_add = auto_now, auto_now_add


def _values(model: type[models.Model], data: dict) -> dict:
    """The document's values for the model's own columns, parsed (unknown keys refused)."""
    fields = {f.name: f for f in model._meta.concrete_fields if not f.is_relation}
    values = {}
    for name, value in data.items():
        field = fields.get(name)
        if field is None or field.primary_key:
            continue
        values[name] = value if isinstance(field, models.JSONField) else field.to_python(value)
    return values


def _user(username: str | None, *, required: bool = False):
    User = get_user_model()
    if username is None:
        if required:
            raise ImportProblem("a verdict has no reviewer")
        return None
    user = User.objects.filter(username=username).first()
    if user is None:
        # A reviewer of another installation: kept as an inactive account that cannot log in.
        user = User(username=username, is_active=False)
        user.set_unusable_password()
        user.save()
    return user


def _policy_version(data: dict) -> PolicyVersion:
    """The installation's version of the same number, which must hold the same content."""
    number = data.get("number")
    version = PolicyVersion.objects.filter(number=number).first()
    values = _values(PolicyVersion, data)
    if version is None:
        return PolicyVersion.objects.create(**{**values, "is_active": False})
    for name in ("thresholds", "question_set", "question_set_version", "quorum"):
        if name in values and getattr(version, name) != values[name]:
            raise ImportProblem(
                f"policy version {number} here differs from the exported one in {name}"
            )
    return version


def run_import(document: dict) -> Run:
    """Create the run of an exported document, with new ids; its decisions keep their hashes,
    which must verify here as they did there (else nothing is imported). Refuses a run whose
    uid is already here."""
    if document.get("format") != EXPORT_FORMAT:
        raise ImportProblem(f"not a run export (format {document.get('format')!r})")
    run_data = document["run"]
    if Run.objects.filter(uid=run_data["uid"]).exists():
        raise ImportProblem(f"run {run_data['uid']} is already in this database")
    with (
        transaction.atomic(),
        _keeping_timestamps(Run, Turn, Decision, Escalation, Verdict, Approval, LabelledExample),
    ):
        version = _policy_version(document["policy_version"])
        run = Run(**_values(Run, run_data), policy_version=version,
                  created_by=_user(run_data.get("created_by")))  # fmt: skip
        run.save(force_insert=True)
        turns = {}
        for turn_data in document["turns"]:
            turn = Turn.objects.create(run=run, **_values(Turn, turn_data))
            turns[turn.index] = turn
            ToolCall.objects.bulk_create(
                ToolCall(turn=turn, **_values(ToolCall, call)) for call in turn_data["tool_calls"]
            )
            if turn_data["decision"] is not None:
                Decision.objects.create(
                    turn=turn, policy_version=version, **_values(Decision, turn_data["decision"])
                )
        for data in document["escalations"]:
            escalation = Escalation.objects.create(
                run=run,
                turn=turns[data["turn_index"]],
                claimed_by=_user(data.get("claimed_by")),
                **_values(Escalation, data),
            )
            for approval in data.get("approvals") or []:
                Approval.objects.create(
                    escalation=escalation,
                    reviewer=_user(approval.get("reviewer"), required=True),
                    used_on_turn=turns.get(approval.get("used_on_turn")),
                    **_values(Approval, approval),
                )
            if data.get("verdict") is not None:
                verdict = Verdict.objects.create(
                    escalation=escalation,
                    reviewer=_user(data["verdict"].get("reviewer"), required=True),
                    **_values(Verdict, data["verdict"]),
                )
                for example in data["verdict"].get("examples", []):
                    values = _values(LabelledExample, example)
                    # A document from before selections were kept: what its verdict labelled.
                    values["selection"] = values.get("selection") or (
                        ExampleSelection.AUDIT_SAMPLE
                        if escalation.kind == EscalationKind.AUDIT_SAMPLE
                        else ExampleSelection.ESCALATED
                    )
                    LabelledExample.objects.create(
                        verdict=verdict,
                        policy_version=PolicyVersion.objects.filter(
                            number=example.get("policy_version")
                        ).first(),
                        labelled_by=_user(example.get("labelled_by")),
                        **values,
                    )
        report = run_chain_verify(run)
        if not report.ok:  # nothing of a document whose log does not hold is kept
            raise ImportProblem(f"the exported chain does not verify: {report.describe()}")
    return run
