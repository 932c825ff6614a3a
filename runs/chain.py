"""The decision log's keyed chain: the key, what a decision's seal and a run's seal cover, and
the checks verify_log makes with them.

Why it looks like this:

- **Keyed.** A seal is HMAC-SHA256 under a key the database does not hold (GUARDIAN_LOG_KEY or
  GUARDIAN_LOG_KEY_FILE; without either, a key derived from SECRET_KEY with a label of its
  own, so it is never SECRET_KEY itself). Someone who can rewrite every row and recompute
  every hash still cannot make a seal verify: an unkeyed SHA-256 chain only shows an edit by
  someone who did not bother to recompute. Each seal records the id of its key (a hash of the
  key, never the key), so keys can rotate: the new key seals from now on, retired keys stay in
  GUARDIAN_LOG_OLD_KEYS to verify what they sealed, and a seal under a key not configured
  here is named "unknown key".

- **A decision seals the story up to it.** Its seal covers its own hashed columns, its link
  to the decision before it (`prev_hash`), the run's header (goal, criteria, tools, budgets,
  actor, guardian, config), its turn (proposal, state and state hash, projection, risk
  projections, steps, usage, feedback), its turn's tool calls (tool, arguments, intent,
  class, idempotency key, and status, result and error as they stood when it decided), and
  what was decided on the turn before it by people: that turn's escalations with their
  verdicts, approvals (action hash, arguments, original arguments) and labelled examples.
  A call whose outcome was still ambiguous when its turn decided (it may have gone through)
  is sealed without its outcome: a reviewer's word, sealed with the verdict, settles it.

- **A run seal covers what comes after the last decision.** A decision cannot seal what is
  written after it: the verdict on the last turn, a cancel, the final status and answer, and
  the log's end itself (deleting the last decision leaves a chain whose every link holds). The
  run's seal is a keyed MAC over the run's header, its status (finished statuses as such,
  the live ones as "active"), stop reason, final answer, the index and hash of its last
  decision and the escalations of that last turn. It is rewritten under the key by every
  write that moves one of those: each decision, each verdict or approval, a cancel, an
  expiry, a run stopped by errors. verify_log also checks the status against the last
  decision (a run succeeded only after a stop with success, or a person's answer on its
  last turn).

- **Cheap on the hot path.** The common turn seals what it holds in memory (the row values it
  wrote, the run it claimed), and writes the run seal in the statement that already updates
  the run: no statement is added. Only turns that read more anyway (after a verdict, an
  escalation, a stop) read what they seal.

Only what survives an export and an import is sealed: the run's uid (not its id), the turn's
index, the policy version's number, people's usernames (not their ids). The hash of the
unkeyed chain (migration 0009) is kept as `content_hash` below for that migration only.
"""

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from guardian_core.engine.canonical import canonical_json, sha256_hex

# The columns of a decision a seal covers, besides the run, the turn and the policy version.
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
# A run's columns that say what it was asked to do and with what: written once, at its start.
RUN_HEADER_FIELDS = (
    "goal",
    "acceptance_criteria",
    "tools",
    "budgets",
    "actor",
    "guardian",
    "config",
)
# A turn's columns its decision seals (timings, gate and times are bookkeeping, not story).
TURN_FIELDS = (
    "proposal",
    "state",
    "state_hash",
    "projection",
    "risk_projections",
    "steps",
    "usage",
    "feedback",
)
CALL_FIELDS = ("position", "tool", "arguments", "intent", "risk_class", "idempotency_key")
CALL_OUTCOME_FIELDS = ("status", "result", "error")
ESCALATION_FIELDS = ("kind", "status", "reason", "summary")
VERDICT_FIELDS = (
    "decision",
    "reason",
    "answer",
    "approved_calls",
    "rerun",
    "risk_labels",
    "resulting_outcome",
    "reviewer",
)
APPROVAL_FIELDS = (
    "position",
    "tool",
    "arguments",
    "original_arguments",
    "idempotency_key",
    "action_hash",
    "reviewer",
)
EXAMPLE_FIELDS = (
    "condition",
    "projection",
    "probability",
    "label",
    "source",
    "question_set_version",
    "model_version",
    "policy_version",
    "labelled_by",
)
# Statuses a run keeps once it has them; the others are sealed as "active" (a claim or a
# reviewer's "continue" moves a run between them without writing anything to the log).
FINISHED_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
SEAL_VERSION = 2

# ---- the key ---------------------------------------------------------------------------------

# The label that makes the derived key a key of its own: HMAC(SECRET_KEY, label).
DERIVED_KEY_LABEL = b"guardian/decision-log/v2"
MIN_KEY_LENGTH = 32


@dataclass(frozen=True)
class LogKeys:
    """The key new seals are made with, and every key a seal may name (current and retired)."""

    current_id: str
    keys: Mapping[str, bytes]

    @property
    def current(self) -> bytes:
        return self.keys[self.current_id]


def key_id(key: bytes) -> str:
    """A key's public name: 16 hex digits of a hash of it (it tells nothing of the key)."""
    return hashlib.sha256(b"guardian log key id:" + key).hexdigest()[:16]


def log_keys() -> LogKeys:
    """The configured keys (re-read when the settings change, as tests override them)."""
    return _keys(
        settings.GUARDIAN_LOG_KEY,
        tuple(settings.GUARDIAN_LOG_OLD_KEYS),
        settings.SECRET_KEY,
        settings.DEBUG,
    )


@lru_cache(maxsize=8)
def _keys(explicit: str, old: tuple[str, ...], secret_key: str, debug: bool) -> LogKeys:
    if explicit:
        current = explicit.encode()
        where = "GUARDIAN_LOG_KEY"
    else:
        current = hmac.new(secret_key.encode(), DERIVED_KEY_LABEL, hashlib.sha256).digest()
        where = "SECRET_KEY (GUARDIAN_LOG_KEY is unset, the log key is derived from it)"
        explicit = secret_key
    if len(explicit) < MIN_KEY_LENGTH and not debug:
        raise ImproperlyConfigured(
            f"{where} is {len(explicit)} characters long: the decision log's key needs at "
            f"least {MIN_KEY_LENGTH} (python -c 'import secrets; print(secrets.token_hex(32))')."
        )
    keys = {key_id(current): current}
    for text in old:
        keys.setdefault(key_id(text.encode()), text.encode())
    return LogKeys(key_id(current), keys)


def check_log_key() -> None:
    """Raise ImproperlyConfigured now if the log's key is unusable (called at startup)."""
    log_keys()


def _mac(key: bytes, content: object) -> str:
    return hmac.new(key, canonical_json(content).encode("utf-8"), hashlib.sha256).hexdigest()


def _plain(value: object) -> object:
    """`value` as it reads back from a JSON column: a seal taken before the row is written
    (tuples, float keys, enum members) equals the one taken from the row read back."""
    return json.loads(json.dumps(value))


# ---- what is sealed -------------------------------------------------------------------------


def run_header(run) -> str:
    """The digest of what the run was asked to do: RUN_HEADER_FIELDS of a Run or a dict."""
    get = run.get if isinstance(run, Mapping) else lambda name: getattr(run, name)
    return sha256_hex(_plain({name: get(name) for name in RUN_HEADER_FIELDS}))


# Run uid -> its header's digest, as this process first read it. The header is written once,
# at the run's start, and a scripted run's config can be large: hashing it on every turn cost
# milliseconds. A header altered in the database later is still sealed as first read, and
# verify_log, which always hashes what the database holds, names the difference.
_HEADERS: dict[str, str] = {}


def run_header_sealed(run) -> str:
    """run_header of a Run being sealed, hashed once per run and process."""
    uid = str(run.uid)
    header = _HEADERS.get(uid)
    if header is None:
        if len(_HEADERS) > 4096:
            _HEADERS.clear()
        header = _HEADERS[uid] = run_header(run)
    return header


def turn_content(turn: Mapping) -> dict:
    """TURN_FIELDS of a turn, as a dict (row values or the values being written)."""
    return {name: turn.get(name) for name in TURN_FIELDS}


def call_content(call: Mapping, *, open_outcome: bool = False) -> dict:
    """A call's sealed fields; without its outcome when it was still ambiguous (open)."""
    names = CALL_FIELDS if open_outcome else (*CALL_FIELDS, *CALL_OUTCOME_FIELDS)
    return {name: call.get(name) for name in names}


def calls_content(calls: Iterable[Mapping], open_positions: Iterable[int] = ()) -> list[dict]:
    """A turn's calls in position order, `open_positions` without their outcome."""
    opened = set(open_positions)
    return [
        call_content(call, open_outcome=call["position"] in opened)
        for call in sorted(calls, key=lambda c: c["position"])
    ]


def story_digest(escalations: Iterable[Mapping]) -> str:
    """The digest of what people decided on one turn: its escalations (in the order they were
    opened), each with its verdict, approvals and labelled examples (dicts of the *_FIELDS).
    The digest of no escalation is a constant: the common turn seals it without a query."""
    story = []
    for escalation in escalations:
        approvals = sorted(
            ({n: a.get(n) for n in APPROVAL_FIELDS} for a in escalation.get("approvals", ())),
            key=canonical_json,
        )
        examples = sorted(
            ({n: e.get(n) for n in EXAMPLE_FIELDS} for e in escalation.get("examples", ())),
            key=canonical_json,
        )
        verdict = escalation.get("verdict")
        story.append(
            {
                **{name: escalation.get(name) for name in ESCALATION_FIELDS},
                "verdict": {n: verdict.get(n) for n in VERDICT_FIELDS} if verdict else None,
                "approvals": approvals,
                "examples": examples,
            }
        )
    return sha256_hex(_plain(story))


NO_STORY = story_digest(())


def decision_content(
    *,
    run_uid: object,
    header: str,
    turn_index: int,
    policy_number: int,
    fields: Mapping,
    turn: Mapping,
    calls: list[dict],
    before: str,
) -> dict:
    """Everything a decision's seal covers (see the module's docstring)."""
    return _plain(
        {
            "v": SEAL_VERSION,
            "run": str(run_uid),
            "turn": int(turn_index),
            "policy_version": int(policy_number),
            "header": header,
            "decision": {name: fields[name] for name in HASHED_FIELDS},
            "turn_content": turn_content(turn),
            "calls": calls,
            "before": before,
        }
    )


def decision_mac(content: Mapping, key: bytes) -> str:
    return _mac(key, content)


def run_phase(status: str) -> str:
    return status if status in FINISHED_STATUSES else "active"


def run_seal_content(
    *,
    run_uid: object,
    header: str,
    policy_number: int,
    status: str,
    stop_reason: str,
    final_answer: str | None,
    head_turn: int | None,
    head: str,
    tail: str,
) -> dict:
    """What a run's seal covers: its header, how it stands, and where its log ends."""
    return _plain(
        {
            "v": SEAL_VERSION,
            "run": str(run_uid),
            "header": header,
            "policy_version": int(policy_number),
            "status": run_phase(status),
            "stop_reason": stop_reason or "",
            "final_answer": final_answer,
            "head_turn": head_turn,
            "head": head,
            "tail": tail,
        }
    )


def run_seal(content: Mapping, keys: LogKeys | None = None) -> dict:
    """The run's `seal` column: the key's id, the end of the log it vouches for (in the
    clear, so verify can say what was cut) and the MAC."""
    keys = keys or log_keys()
    return {
        "key": keys.current_id,
        "head_turn": content["head_turn"],
        "head": content["head"],
        "status": content["status"],
        "mac": _mac(keys.current, content),
    }


# ---- sealing a new decision ------------------------------------------------------------------

# Policy version id -> number. A version's number never changes once a run pins it (the
# policy trigger refuses it), so it is read once per process and never again.
_POLICY_NUMBERS: dict[int, int] = {}


def policy_number(run) -> int:
    """The number of the run's policy version, without a query after the first (the turn has
    usually loaded the version already, to build its policy)."""
    loaded = run._state.fields_cache.get("policy_version")
    if loaded is not None and loaded.pk == run.policy_version_id:
        _POLICY_NUMBERS[loaded.pk] = loaded.number
        return loaded.number
    number = _POLICY_NUMBERS.get(run.policy_version_id)
    if number is None:
        if len(_POLICY_NUMBERS) > 4096:
            _POLICY_NUMBERS.clear()
        number = _POLICY_NUMBERS[run.policy_version_id] = run.policy_version.number
    return number


def seal_fields(
    fields: dict,
    *,
    run,
    turn_index: int,
    prev_hash: str,
    turn: Mapping,
    calls: list[dict],
    before: str = NO_STORY,
) -> dict:
    """`fields` (a decision's HASHED_FIELDS but prev_hash) with prev_hash, content_hash (the
    keyed seal) and seal_key. `turn` holds the turn's TURN_FIELDS as they are written, `calls`
    is calls_content() of its calls, `before` the story_digest of the turn before it."""
    keys = log_keys()
    fields = {**fields, "prev_hash": prev_hash}
    content = decision_content(
        run_uid=run.uid,
        header=run_header_sealed(run),
        turn_index=turn_index,
        policy_number=policy_number(run),
        fields=fields,
        turn=turn,
        calls=calls,
        before=before,
    )
    fields["content_hash"] = decision_mac(content, keys.current)
    fields["seal_key"] = keys.current_id
    return fields


def seal(decision, **kwargs) -> None:
    """Set a new, unsaved decision's prev_hash, content_hash and seal_key (see seal_fields)."""
    values = {name: getattr(decision, name) for name in HASHED_FIELDS if name != "prev_hash"}
    for name, value in seal_fields(values, **kwargs).items():
        setattr(decision, name, value)


# ---- checking --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainReport:
    """What checking one run's log found: every problem, each with the turn it is at (None
    when it concerns the run as a whole), in turn order."""

    run_id: int
    run_uid: str
    decisions: int
    head: str  # the last decision's content_hash ("" for a run without decisions)
    problems: tuple[tuple[int | None, str], ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def broken_turn(self) -> int | None:
        return self.problems[0][0] if self.problems else None

    @property
    def problem(self) -> str:
        return self.problems[0][1] if self.problems else ""

    def lines(self) -> list[str]:
        """One line per problem, naming the run and the turn."""
        return [
            f"run {self.run_id} {'turn ' + str(turn) if turn is not None else '(the run)'}: {text}"
            for turn, text in self.problems
        ]

    def describe(self) -> str:
        if self.ok:
            decisions = f"{self.decisions} decision{'' if self.decisions == 1 else 's'}"
            return f"run {self.run_id}: {decisions}, chain intact, head {self.head}"
        return "; ".join(self.lines())


def _key_problem(key: str, keys: LogKeys) -> str:
    if not key:
        return "not sealed under any key (an unkeyed seal from before the keyed log)"
    return f"sealed under an unknown key {key} (not GUARDIAN_LOG_KEY nor GUARDIAN_LOG_OLD_KEYS)"


def row_content(
    run: Mapping,
    row: Mapping,
    policy_number_of,
    calls: list[Mapping],
    stories: Mapping[int, list[dict]],
    previous_index: int | None,
    header: str | None = None,
) -> dict:
    """decision_content of a decided turn read from the database (see log_check's rows): the
    calls an escalation of the turn lists as ambiguous are sealed without their outcome, and
    the story before it is that of the previous decided turn."""
    index = row["turn_index"]
    opened = {
        position
        for escalation in stories.get(index, [])
        for position in (escalation.get("reason") or {}).get("ambiguous_calls", [])
        if isinstance(position, int)
    }
    before = NO_STORY
    if previous_index is not None:
        before = story_digest(stories.get(previous_index, []))
    return decision_content(
        run_uid=run["uid"],
        header=header or run_header(run),
        turn_index=index,
        policy_number=policy_number_of(row["policy_version_id"]),
        fields=row,
        turn=row["turn"],
        calls=calls_content(calls, opened),
        before=before,
    )


def log_check(
    *,
    run: Mapping,
    policy_number_of,
    decisions: Iterable[Mapping],
    calls_of,
    stories: Mapping[int, list[dict]],
    undecided_escalations: Iterable[int] = (),
) -> ChainReport:
    """Check one run's log. `run` holds the run's columns (uid, RUN_HEADER_FIELDS, status,
    stop_reason, final_answer, seal); `decisions` its decided turns in index order, each a
    dict of the turn's TURN_FIELDS, turn_index, the decision's HASHED_FIELDS, content_hash,
    seal_key, policy_version_id; `calls_of(turn_index)` the turn's calls (dicts);
    `stories[turn_index]` the escalations opened on that turn (see story_digest), each with
    "ambiguous_calls"; `undecided_escalations` turn indexes with an escalation and no
    decision. Goes on past every problem, so each is named."""
    keys = log_keys()
    header = run_header(run)
    problems: list[tuple[int | None, str]] = []
    prev, count, previous_index, last = "", 0, None, None
    for row in decisions:
        count += 1
        index = row["turn_index"]
        if row["prev_hash"] != prev:
            problems.append(
                (
                    index,
                    "prev_hash does not match the previous decision's hash "
                    "(a decision was removed, inserted or reordered)",
                )
            )
        key = keys.keys.get(row.get("seal_key") or "")
        if key is None:
            problems.append((index, _key_problem(row.get("seal_key") or "", keys)))
        else:
            content = row_content(
                run, row, policy_number_of, calls_of(index), stories, previous_index, header
            )
            if not hmac.compare_digest(row["content_hash"], decision_mac(content, key)):
                problems.append(
                    (
                        index,
                        "content_hash does not match the decision's sealed content (the "
                        "decision, its turn, its tool calls, the run's goal or what people "
                        "decided on the turn before it was altered, or forged without the key)",
                    )
                )
        prev, previous_index, last = row["content_hash"], index, row
    for index in undecided_escalations:
        problems.append((index, "an escalation on a turn that has no decision"))
    head_turn = last["turn_index"] if last else None
    problems.extend(
        _run_seal_problems(run, keys, header, policy_number_of, head_turn, prev, stories)
    )
    problems.extend(_status_problems(run, last, stories.get(head_turn, [])))
    problems.sort(key=lambda p: -1 if p[0] is None else p[0])
    return ChainReport(run["id"], str(run["uid"]), count, prev, tuple(problems))


def _run_seal_problems(run, keys, header, policy_number_of, head_turn, head, stories):
    seal = run.get("seal") or {}
    where = head_turn
    if not seal:
        return [(where, "the run has no run seal (it was removed, or the run was never sealed)")]
    key = keys.keys.get(seal.get("key") or "")
    if key is None:
        return [(where, "run seal " + _key_problem(seal.get("key") or "", keys))]
    sealed_turn = seal.get("head_turn")
    problems = []
    if sealed_turn != head_turn:
        ends = "has no decision" if head_turn is None else f"ends at turn {head_turn}"
        problems.append(
            (
                sealed_turn if isinstance(sealed_turn, int) else where,
                f"the run seal says the log ends at turn {sealed_turn}, but it {ends} "
                "(its tail was cut, or decisions were added)",
            )
        )
    content = run_seal_content(
        run_uid=run["uid"],
        header=header,
        policy_number=policy_number_of(run["policy_version_id"]),
        status=run["status"],
        stop_reason=run["stop_reason"],
        final_answer=run["final_answer"],
        head_turn=head_turn,
        head=head,
        tail=story_digest(stories.get(head_turn, [])) if head_turn is not None else NO_STORY,
    )
    if not problems and not hmac.compare_digest(str(seal.get("mac", "")), _mac(key, content)):
        problems.append(
            (
                where,
                "the run seal does not match the run (its goal, status, stop reason, final "
                "answer, last decision or the verdict on its last turn was altered)",
            )
        )
    return problems


# The run's status against its last decision: what each outcome may be followed by without a
# person's verdict on that turn, and with one.
_STATUS_AFTER = {
    "stop_success": {"succeeded", "cancelled"},
    "stop_failure": {"failed", "cancelled"},
    "escalate": {"waiting", "cancelled", "failed"},
    "continue": {"pending", "running", "failed", "cancelled"},
    "replan": {"pending", "running", "failed", "cancelled"},
}
_STATUS_AFTER_VERDICT = {"running", "pending", "succeeded", "failed", "cancelled"}


def _status_problems(run, last, escalations) -> list:
    status = run["status"]
    if last is None:
        if status in ("succeeded",) or run["final_answer"] is not None:
            return [(None, f"the run is {status} with no decision at all")]
        return []
    outcome, index = last["outcome"], last["turn_index"]
    verdicts = [e["verdict"] for e in escalations if e.get("verdict")]
    allowed = set(_STATUS_AFTER.get(outcome, ()))
    if outcome == "escalate" and verdicts:
        allowed = _STATUS_AFTER_VERDICT
    if status not in allowed:
        return [(index, f"the run is {status}, but its last decision is {outcome}")]
    if status == "succeeded":
        if outcome == "stop_success" and run["stop_reason"] != last["stop_reason"]:
            return [
                (
                    index,
                    f"the run succeeded for {run['stop_reason']!r}, but its last decision "
                    f"stopped for {last['stop_reason']!r}",
                )
            ]
        if outcome == "escalate" and not any(v.get("decision") in ("approve", "answer")
                                             for v in verdicts):  # fmt: skip
            return [(index, "the run succeeded on a verdict that approved nothing")]
        answer = (last["turn"].get("proposal") or {}).get("message")
        if (
            outcome == "stop_success"
            and run["actor"] != "coder_reviewer"
            and (run["final_answer"] != answer)
        ):
            # The agent loop's answer is the message of the proposal that reached the goal.
            return [(index, "the run's final answer is not the one its last decision accepted")]
    return []


# ---- the unkeyed chain of migration 0009 ----------------------------------------------------


def content_hash(*, run_uid: object, turn_index: int, policy_number: int, fields: dict) -> str:
    """The unkeyed SHA-256 of a decision (the chain before the keyed log): kept for migration
    0009, which chained the decisions of its day, and for the re-seal, which checks that old
    chain before it seals a run under the key."""
    content = {name: fields[name] for name in HASHED_FIELDS}
    content = json.loads(json.dumps(content))
    content.update(run=str(run_uid), turn=int(turn_index), policy_version=int(policy_number))
    return sha256_hex(content)
