"""The keyed log's content read from the database (runs/chain.py says what is sealed and why):
the readers verify_log checks with, and the writes that seal what a turn does not hold in
memory (a run's seal after a verdict, a cancel, an expiry, a stop; the story a turn after a
verdict seals; the re-seal of a log made before the keyed chain).

Every reader takes the models it reads from `models` (the app's, or a migration's historical
ones), so the re-seal migration seals exactly what verify_log later reads.
"""

import hmac
from collections.abc import Iterator
from dataclasses import dataclass

from django.apps import apps as global_apps
from django.db import models as m

from runs import chain


@dataclass(frozen=True)
class LogModels:
    """The models the log is read from."""

    Run: type
    Turn: type
    Decision: type
    ToolCall: type
    Escalation: type
    Verdict: type
    Approval: type
    LabelledExample: type
    PolicyVersion: type

    @classmethod
    def of(cls, apps=global_apps) -> "LogModels":
        return cls(
            Run=apps.get_model("runs", "Run"),
            Turn=apps.get_model("runs", "Turn"),
            Decision=apps.get_model("runs", "Decision"),
            ToolCall=apps.get_model("runs", "ToolCall"),
            Escalation=apps.get_model("escalations", "Escalation"),
            Verdict=apps.get_model("escalations", "Verdict"),
            Approval=apps.get_model("escalations", "Approval"),
            LabelledExample=apps.get_model("escalations", "LabelledExample"),
            PolicyVersion=apps.get_model("guardian_core", "PolicyVersion"),
        )


def _models(models: LogModels | None) -> LogModels:
    return models or LogModels.of()


RUN_COLUMNS = ("id", "uid", *chain.RUN_HEADER_FIELDS, "status", "stop_reason", "final_answer",
               "policy_version_id", "seal")  # fmt: skip


def run_row(run_id: int, models: LogModels | None = None) -> dict | None:
    models = _models(models)
    return models.Run.objects.filter(pk=run_id).values(*RUN_COLUMNS).first()


def stories(
    run_id: int, *, turn_id: int | None = None, models: LogModels | None = None
) -> dict[int, list[dict]]:
    """The escalations of the run (or of one turn), by the index of the turn they were opened
    on, each with its verdict, approvals and labelled examples as chain.story_digest reads
    them. Four queries, whatever the run's length; none more when there is no escalation.

    An audit sample is no part of the story (escalations/audit_samples.py): it is drawn after
    its turn is sealed, holds nothing, and its verdict moves nothing, so neither the next
    decision nor the run's seal covers it; its labelled example is kept unchanged by the log's
    triggers like every other."""
    models = _models(models)
    where = {"turn_id": turn_id} if turn_id is not None else {"run_id": run_id}
    escalations = {
        row["id"]: {**row, "verdict": None, "approvals": [], "examples": []}
        for row in models.Escalation.objects.filter(**where)
        .exclude(kind="audit_sample")
        .order_by("id")
        .values("id", "turn_id", *chain.ESCALATION_FIELDS, turn_index=m.F("turn__index"))
    }
    if not escalations:
        return {}
    ids = list(escalations)
    named = {"reviewer_name": m.F("reviewer__username")}
    for row in models.Verdict.objects.filter(escalation_id__in=ids).values(
        "escalation_id", *(f for f in chain.VERDICT_FIELDS if f != "reviewer"), **named
    ):
        row["reviewer"] = row.pop("reviewer_name")
        escalations[row["escalation_id"]]["verdict"] = row
    for row in models.Approval.objects.filter(escalation_id__in=ids).values(
        "escalation_id", *(f for f in chain.APPROVAL_FIELDS if f != "reviewer"), **named
    ):
        row["reviewer"] = row.pop("reviewer_name")
        escalations[row["escalation_id"]]["approvals"].append(row)
    example_fields = [f for f in chain.EXAMPLE_FIELDS if f not in ("policy_version", "labelled_by")]
    for row in models.LabelledExample.objects.filter(verdict__escalation_id__in=ids).values(
        *example_fields,
        escalation=m.F("verdict__escalation_id"),
        policy_number=m.F("policy_version__number"),
        labeller=m.F("labelled_by__username"),
    ):
        row["policy_version"] = row.pop("policy_number")
        row["labelled_by"] = row.pop("labeller")
        escalations[row.pop("escalation")]["examples"].append(row)
    by_turn: dict[int, list[dict]] = {}
    for escalation in escalations.values():
        by_turn.setdefault(escalation["turn_index"], []).append(escalation)
    return by_turn


def turn_story(turn_id: int, models: LogModels | None = None) -> str:
    """story_digest of the escalations opened on one turn (and what hangs on them)."""
    found = stories(0, turn_id=turn_id, models=models)
    return chain.story_digest(next(iter(found.values()), []))


CALL_COLUMNS = (*chain.CALL_FIELDS, *chain.CALL_OUTCOME_FIELDS)


def turn_calls(turn_id: int, models: LogModels | None = None) -> list[dict]:
    models = _models(models)
    return list(models.ToolCall.objects.filter(turn_id=turn_id).values("id", *CALL_COLUMNS))


DECISION_COLUMNS = ("policy_version_id", "content_hash", "seal_key", *chain.HASHED_FIELDS)


def decided_turns(run_id: int, models: LogModels | None = None) -> Iterator[dict]:
    """The run's decided turns in index order, as chain.log_check reads them: the decision's
    hashed fields, content_hash, seal_key, policy_version_id, turn_index, and the turn's
    sealed fields under "turn". Read in chunks."""
    models = _models(models)
    turn_columns = {f"turn_{name}": m.F(f"turn__{name}") for name in chain.TURN_FIELDS}
    rows = (
        models.Decision.objects.filter(turn__run_id=run_id)
        .order_by("turn__index")
        .values(
            *DECISION_COLUMNS, turn_index=m.F("turn__index"), turn_pk=m.F("turn_id"), **turn_columns
        )  # fmt: skip
        .iterator(chunk_size=500)
    )
    for row in rows:
        row["turn"] = {name: row.pop(f"turn_{name}") for name in chain.TURN_FIELDS}
        yield row


def _policy_numbers(models: LogModels):
    numbers: dict[int, int] = {}

    def number_of(policy_version_id: int) -> int:
        if policy_version_id not in numbers:
            numbers[policy_version_id] = models.PolicyVersion.objects.values_list(
                "number", flat=True
            ).get(pk=policy_version_id)
        return numbers[policy_version_id]

    return number_of


def _calls_by_turn(run_id: int, models: LogModels) -> dict[int, list[dict]]:
    calls: dict[int, list[dict]] = {}
    for row in models.ToolCall.objects.filter(turn__run_id=run_id).values(
        *CALL_COLUMNS, turn_index=m.F("turn__index")
    ):
        calls.setdefault(row.pop("turn_index"), []).append(row)
    return calls


def run_log_check(run_id: int, models: LogModels | None = None) -> chain.ChainReport | None:
    """Check one run's keyed log (None if there is no such run). Reads the run, its decided
    turns (in chunks), its calls and its escalations: a few queries whatever its length."""
    models = _models(models)
    run = run_row(run_id, models)
    if run is None:
        return None
    calls = _calls_by_turn(run_id, models)
    found = stories(run_id, models=models)
    decided = set(
        models.Decision.objects.filter(turn__run_id=run_id).values_list("turn__index", flat=True)
    )
    return chain.log_check(
        run=run,
        policy_number_of=_policy_numbers(models),
        decisions=decided_turns(run_id, models),
        calls_of=lambda index: calls.get(index, []),
        stories=found,
        undecided_escalations=sorted(set(found) - decided),
    )


def run_log_reseal(run_id: int, models: LogModels | None = None) -> bool:
    """Seal a run made before the keyed log under the current key: each decision (with the
    story it rests on, as verify_log reads it) and the run. Only if its unkeyed chain
    (migration 0009) still holds: a log already altered is not blessed with a key, and
    verify_log goes on naming it. Returns whether the run was sealed."""
    models = _models(models)
    run = run_row(run_id, models)
    number_of = _policy_numbers(models)
    rows = list(decided_turns(run_id, models))
    prev = ""
    for row in rows:
        legacy = chain.content_hash(
            run_uid=run["uid"],
            turn_index=row["turn_index"],
            policy_number=number_of(row["policy_version_id"]),
            fields=row,
        )
        if row["prev_hash"] != prev or row["content_hash"] != legacy:
            return False
        prev = row["content_hash"]
    run_log_seal_all(run_id, models=models)
    return True


def run_log_seal_all(run_id: int, *, keys=None, models: LogModels | None = None) -> None:
    """Seal every decision of the run and the run itself, as the database holds them now,
    under `keys` (the configured ones by default). The re-seal of a trusted log; the tests
    also play a forger with it, who has every row but not the key."""
    models = _models(models)
    keys = keys or chain.log_keys()
    run = run_row(run_id, models)
    number_of = _policy_numbers(models)
    calls = _calls_by_turn(run_id, models)
    found = stories(run_id, models=models)
    prev, previous = "", None
    for row in decided_turns(run_id, models):
        row["prev_hash"] = prev
        content = chain.row_content(
            run, row, number_of, calls.get(row["turn_index"], []), found, previous
        )
        prev = chain.decision_mac(content, keys.current)
        models.Decision.objects.filter(turn_id=row["turn_pk"]).update(
            prev_hash=row["prev_hash"], content_hash=prev, seal_key=keys.current_id
        )
        previous = row["turn_index"]
    run_reseal(run_id, models, keys=keys)


# ---- writing seals ---------------------------------------------------------------------------


def run_seal_value(
    run, *, head_turn: int | None, head: str, tail: str = chain.NO_STORY, keys=None
) -> dict:
    """The run's seal for `run` (a Run or a dict of RUN_COLUMNS) as it stands now."""
    get = run.get if isinstance(run, dict) else lambda name: getattr(run, name)
    number = (
        chain.policy_number(run)
        if not isinstance(run, dict)
        else _policy_number_by_id(get("policy_version_id"))
    )
    content = chain.run_seal_content(
        run_uid=get("uid"),
        header=chain.run_header(run) if isinstance(run, dict) else chain.run_header_sealed(run),
        policy_number=number,
        status=get("status"),
        stop_reason=get("stop_reason"),
        final_answer=get("final_answer"),
        head_turn=head_turn,
        head=head,
        tail=tail,
    )
    return chain.run_seal(content, keys)


def run_seal_holds(run, *, head_turn: int | None, head: str, tail: str) -> bool:
    """Whether the run's stored seal (a Run as loaded) vouches for this end of its log: a turn
    that seals what people decided on the turn before checks first that it is what the run's
    seal, made with the verdict, covered."""
    seal = run.seal or {}
    keys = chain.log_keys()
    key = keys.keys.get(seal.get("key") or "")
    if key is None:
        return False
    expected = run_seal_value(
        run,
        head_turn=head_turn,
        head=head,
        tail=tail,
        keys=chain.LogKeys(seal["key"], {seal["key"]: key}),
    )
    return hmac.compare_digest(str(seal.get("mac", "")), expected["mac"])


def _policy_number_by_id(policy_version_id: int, models: LogModels | None = None) -> int:
    """Read, not cached: verify and the slow paths seal what the database holds."""
    models = _models(models)
    return models.PolicyVersion.objects.values_list("number", flat=True).get(pk=policy_version_id)


def run_reseal(run_id: int, models: LogModels | None = None, *, keys=None) -> None:
    """Seal the run as it stands in the database (call it inside the transaction that moved
    it): its status, answer, last decision and what people decided on its last turn. A few
    queries; the common turn seals in memory instead (runs/recording.py)."""
    models = _models(models)
    run = run_row(run_id, models)
    if run is None:
        return
    last = (
        models.Decision.objects.filter(turn__run_id=run_id)
        .order_by("-turn__index")
        .values("content_hash", "turn_id", index=m.F("turn__index"))
        .first()
    )
    number = _policy_number_by_id(run["policy_version_id"], models)
    content = chain.run_seal_content(
        run_uid=run["uid"],
        header=chain.run_header(run),
        policy_number=number,
        status=run["status"],
        stop_reason=run["stop_reason"],
        final_answer=run["final_answer"],
        head_turn=last["index"] if last else None,
        head=last["content_hash"] if last else "",
        tail=turn_story(last["turn_id"], models) if last else chain.NO_STORY,
    )
    models.Run.objects.filter(pk=run_id).update(seal=chain.run_seal(content, keys))


def turn_seal_inputs(turn_id: int, models: LogModels | None = None) -> tuple[dict, list[dict]]:
    """A written turn's sealed fields and its calls, read back (the paths that do not hold
    them in memory: a retried turn, the review loop, the tests' factories)."""
    models = _models(models)
    turn = models.Turn.objects.filter(pk=turn_id).values(*chain.TURN_FIELDS).get()
    return turn, turn_calls(turn_id, models)


def story_before(run_id: int, turn_index: int, models: LogModels | None = None) -> str:
    """story_digest of the escalations on the turn before `turn_index` (a turn that follows a
    verdict seals it); no query is needed when the caller knows there were none."""
    if turn_index == 0:
        return chain.NO_STORY
    models = _models(models)
    turn_id = (
        models.Turn.objects.filter(run_id=run_id, index=turn_index - 1)
        .values_list("id", flat=True)
        .first()
    )
    return turn_story(turn_id, models) if turn_id is not None else chain.NO_STORY


def decision_seal_from_db(decision, *, run, turn, prev_hash: str, opened=()) -> None:
    """Seal a new, unsaved decision of `turn` (already written with its calls) from what the
    database holds, `opened` the positions of calls still ambiguous (sealed without their
    outcome): a slow path's seal."""
    fields, calls = turn_seal_inputs(turn.pk)
    chain.seal(
        decision,
        run=run,
        turn_index=turn.index,
        prev_hash=prev_hash,
        turn=fields,
        calls=chain.calls_content(calls, opened),
        before=story_before(run.pk, turn.index),
    )
