"""The decision log's hash chain: what a decision's hash covers, sealing a new decision, and
walking a run's chain to find the first link that does not hold.

Each decision's `content_hash` is the SHA-256 of its canonical content, which includes
`prev_hash`, the hash of the decision before it in the same run ("" for the first). Editing,
removing or reordering any decision breaks the chain at that turn. Only what survives an
export and an import is hashed: the run's uid (not its id), the turn's index, the policy
version's number (not its id).
"""

import json
from dataclasses import dataclass

from guardian_core.engine.canonical import sha256_hex

# The columns of a decision the hash covers, besides the run, the turn and the policy version.
HASHED_FIELDS = (
    "outcome",
    "answers",
    "risk_answers",
    "fired",
    "call_signatures",
    "stop_reason",
    "thresholds",
    "reasons",
    "question_set_version",
    "guardian_model_version",
    "state_hash",
    "prev_hash",
)


def content_hash(*, run_uid: object, turn_index: int, policy_number: int, fields: dict) -> str:
    """The hash of one decision: `fields` holds HASHED_FIELDS. JSON values go through a JSON
    round trip first, so a hash taken before the row is written (tuples, float keys) equals
    the one taken from the row read back."""
    content = {name: fields[name] for name in HASHED_FIELDS}
    content = json.loads(json.dumps(content))
    content.update(run=str(run_uid), turn=int(turn_index), policy_version=int(policy_number))
    return sha256_hex(content)


# Policy version id -> number. A version's number never changes once a run pins it (the
# policy trigger refuses it), so it is read once per process and never again.
_POLICY_NUMBERS: dict[int, int] = {}


def policy_number(run) -> int:
    """The number of the run's policy version, without a query after the first (the turn has
    usually loaded the version already, to build its policy)."""
    number = _POLICY_NUMBERS.get(run.policy_version_id)
    if number is None:
        if len(_POLICY_NUMBERS) > 4096:
            _POLICY_NUMBERS.clear()
        number = _POLICY_NUMBERS[run.policy_version_id] = run.policy_version.number
    return number


def seal(decision, *, run, turn_index: int, prev_hash: str) -> None:
    """Set a new, unsaved decision's prev_hash and content_hash."""
    decision.prev_hash = prev_hash
    decision.content_hash = content_hash(
        run_uid=run.uid,
        turn_index=turn_index,
        policy_number=policy_number(run),
        fields={name: getattr(decision, name) for name in HASHED_FIELDS},
    )


def seal_fields(fields: dict, *, run, turn_index: int, prev_hash: str) -> dict:
    """`fields` (a decision's HASHED_FIELDS but prev_hash) with prev_hash and content_hash."""
    fields = {**fields, "prev_hash": prev_hash}
    fields["content_hash"] = content_hash(
        run_uid=run.uid, turn_index=turn_index, policy_number=policy_number(run), fields=fields
    )
    return fields


@dataclass(frozen=True)
class ChainReport:
    """What walking one run's chain found: ok, or the first turn whose link does not hold."""

    run_id: int
    run_uid: str
    decisions: int
    head: str  # the last decision's content_hash ("" for a run without decisions)
    broken_turn: int | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return self.broken_turn is None

    def describe(self) -> str:
        if self.ok:
            decisions = f"{self.decisions} decision{'' if self.decisions == 1 else 's'}"
            return f"run {self.run_id}: {decisions}, chain intact, head {self.head}"
        return f"run {self.run_id} turn {self.broken_turn}: {self.problem}"


def chain_check(run_id: int, run_uid: object, policy_number_of, rows) -> ChainReport:
    """Walk `rows` (dicts with turn_index, policy_version_id, HASHED_FIELDS and content_hash,
    in turn order) and report the first decision whose hash or link does not hold.
    `policy_number_of` maps a policy version id to its number."""
    prev, count = "", 0
    for row in rows:
        count += 1
        index = row["turn_index"]
        if row["prev_hash"] != prev:
            return ChainReport(
                run_id, str(run_uid), count, prev, index,
                "prev_hash does not match the previous decision's hash "
                "(a decision was removed, inserted or reordered)",
            )  # fmt: skip
        expected = content_hash(
            run_uid=run_uid,
            turn_index=index,
            policy_number=policy_number_of(row["policy_version_id"]),
            fields=row,
        )
        if row["content_hash"] != expected:
            return ChainReport(
                run_id, str(run_uid), count, prev, index,
                "content_hash does not match the decision's content (the row was altered)",
            )  # fmt: skip
        prev = row["content_hash"]
    return ChainReport(run_id, str(run_uid), count, prev)
