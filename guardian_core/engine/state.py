"""The loop state (append-only, versioned per turn), its hash, and the bounded projection the
guardian sees, in the trace format of DESIGN.md."""

from dataclasses import dataclass, replace

from guardian_core.engine.canonical import canonical_json, sha256_hex


@dataclass(frozen=True)
class HistoryItem:
    turn: int
    summary: str


@dataclass(frozen=True)
class PendingCall:
    """One call of the proposal waiting to run; written to the state before anything runs."""

    tool: str
    description: str
    arguments: object
    intent: str


# The history items a state keeps: what the projection can show. Older ones are counted in
# `history_dropped` and stay in the turns' recorded steps, from which any version is rebuilt.
HISTORY_WINDOW = 8


@dataclass(frozen=True)
class LoopState:
    """The single source of truth of a run. Never edited: each turn makes the next version.

    It holds what the next turn needs and no more, so a turn costs the same at any run
    length: the last HISTORY_WINDOW history items (the older ones counted), the last results,
    the pending calls, and `hash`, which chains every version to the one before it.
    """

    goal: str
    acceptance_criteria: tuple[str, ...] = ()
    history: tuple[HistoryItem, ...] = ()
    last_results: tuple[str, ...] = ()  # tool outputs, verbatim and untrusted
    pending: tuple[PendingCall, ...] = ()
    replans: int = 0
    version: int = 0
    history_dropped: int = 0
    # hash(previous hash, this version's step); "" for a state made directly, whose hash is
    # then that of its content (see state_hash).
    hash: str = ""

    def to_dict(self) -> dict:
        return {
            **self.content(),
            "history_dropped": self.history_dropped,
            "hash": state_hash(self),
        }

    def content(self) -> dict:
        return {
            "goal": self.goal,
            "acceptance_criteria": list(self.acceptance_criteria),
            "history": [{"turn": h.turn, "summary": h.summary} for h in self.history],
            "last_results": list(self.last_results),
            "pending": [_pending_dict(call) for call in self.pending],
            "replans": self.replans,
            "version": self.version,
        }


def state_from_dict(data: dict) -> LoopState:
    """The inverse of LoopState.to_dict (a missing key takes its default)."""
    return LoopState(
        goal=data["goal"],
        acceptance_criteria=tuple(data.get("acceptance_criteria", ())),
        history=tuple(HistoryItem(h["turn"], h["summary"]) for h in data.get("history", ())),
        last_results=tuple(data.get("last_results", ())),
        pending=tuple(PendingCall(**call) for call in data.get("pending", ())),
        replans=data.get("replans", 0),
        version=data.get("version", 0),
        history_dropped=data.get("history_dropped", 0),
        hash=data.get("hash", ""),
    )


def state_step(
    *,
    add_history: tuple[HistoryItem, ...] = (),
    last_results: tuple[str, ...] | None = None,
    pending: tuple[PendingCall, ...] | None = None,
    replanned: bool = False,
) -> dict:
    """One step from a version to the next, as canonical JSON data: what state_next applies,
    what the hash chain hashes and what a turn records."""
    return {
        "add_history": [[h.turn, h.summary] for h in add_history],
        "last_results": None if last_results is None else list(last_results),
        "pending": None if pending is None else [_pending_dict(call) for call in pending],
        "replanned": bool(replanned),
    }


def state_next(
    state: LoopState,
    *,
    add_history: tuple[HistoryItem, ...] = (),
    last_results: tuple[str, ...] | None = None,
    pending: tuple[PendingCall, ...] | None = None,
    replanned: bool = False,
) -> LoopState:
    """The next version: history only grows; results and pending are replaced when given."""
    step = state_step(
        add_history=add_history, last_results=last_results, pending=pending, replanned=replanned
    )
    return state_apply(state, step)


def state_apply(state: LoopState, step: dict) -> LoopState:
    """The next version after one recorded step (see state_step). O(1) in the run's length:
    the history is cut to its window and the hash chains the step to the previous hash."""
    history = state.history + tuple(HistoryItem(t, s) for t, s in step["add_history"])
    cut = max(0, len(history) - HISTORY_WINDOW)
    pending = step["pending"]
    return replace(
        state,
        history=history[cut:],
        history_dropped=state.history_dropped + cut,
        last_results=state.last_results
        if step["last_results"] is None
        else tuple(step["last_results"]),
        pending=state.pending
        if pending is None
        else tuple(PendingCall(**call) for call in pending),
        replans=state.replans + (1 if step["replanned"] else 0),
        version=state.version + 1,
        hash=sha256_hex(["guardian-state/2", state_hash(state), step]),
    )


def state_rebuild(start: LoopState, steps) -> LoopState:
    """Any version of a run's state, from its start and the steps its turns recorded; its
    hash is checked by comparing with the hash the turn stored."""
    state = start
    for step in steps:
        state = state_apply(state, step)
    return state


# How a person's verdict reads in the history. The guardian judges the run from what ran and
# what it returned; a verdict is part of that record (a rejected call never ran).
APPROVED_BY_REVIEWER = "approved by reviewer"
REJECTED_BY_REVIEWER = "rejected by reviewer"
CONFIRMED_DONE_BY_REVIEWER = "confirmed done by reviewer"
NOT_DONE_PER_REVIEWER = "not done per reviewer"
ANSWERED_BY_REVIEWER = "answered by reviewer"
# How a call whose output repeats the previous turn's reads in the history: the state keeps only
# the last results, so this mark is what lets the guardian tell a loop that learns nothing (the
# same read, the same answer) from one that walks over new records with the same tool.
SAME_RESULT = "(same result as before)"


def verdict_item(turn: int, *, subject: str, verdict: str, reason: str = "") -> HistoryItem:
    """The history item that records a person's verdict on turn `turn`, e.g.
    "turn 1: issue_refund rejected by reviewer: the parcel was insured"."""
    summary = f"turn {turn}: {subject} {verdict}"
    reason = " ".join(reason.split())
    if reason:
        summary += f": {reason[:300]}"
    return HistoryItem(turn, summary)


# How a user's message reads in the history: the agent talks to the person it works for mid-run
# (a confirmation, a missing detail), and what they answered is part of the run as much as what
# a tool returned. The local guardian's run-level features read this prefix; the text after it
# is the user's, untrusted data like any tool output. One line, bounded like a reviewer's
# reason: the whole message stays in the turn's recorded proposal.
USER_SAID = "user said: "
USER_MESSAGE_SUMMARY_CHARS = 300


def user_message_item(turn: int, text: str) -> HistoryItem:
    """The history item that records what the user said before turn `turn`'s proposal, e.g.
    "user said: yes, refund it to the card". Whitespace runs become one space; text past
    USER_MESSAGE_SUMMARY_CHARS is cut and marked, so the guardian knows it read a part."""
    text = " ".join(text.split())
    if len(text) > USER_MESSAGE_SUMMARY_CHARS:
        text = text[: USER_MESSAGE_SUMMARY_CHARS - len(TRUNCATION_MARK)] + TRUNCATION_MARK
    return HistoryItem(turn, USER_SAID + text)


def state_hash(state: LoopState) -> str:
    """The state's SHA-256: the chained hash of a version made by state_next, or the hash of
    the canonical content of a state made directly (a run's first version). Equal states
    with equal histories hash equal in any process."""
    return state.hash or sha256_hex(state.content())


@dataclass(frozen=True)
class Projection:
    data: dict  # the trace-format projection: goal, acceptance_criteria, history, ...
    history_dropped: int = 0
    results_dropped: int = 0
    chars_cut: int = 0

    @property
    def truncated(self) -> bool:
        return bool(self.history_dropped or self.results_dropped or self.chars_cut)


TRUNCATION_MARK = " …[truncated]"


def project(
    state: LoopState,
    *,
    history_limit: int = HISTORY_WINDOW,
    max_chars: int = 8000,
    pending_index: int | None = None,
) -> Projection:
    """The bounded view of `state` the guardian answers on.

    Keeps the last `history_limit` history items and, while the canonical JSON is longer
    than `max_chars`, drops the oldest history item, then the oldest result, then shortens
    the longest remaining text. What was cut is said in the projection's "truncated" key.
    Results are listed under "untrusted": they are data to judge, never instructions.
    `pending_index` selects the proposed call to show as "pending_proposal" (the risk check).
    """
    history = list(state.history)
    cut = max(0, len(history) - history_limit)
    history = history[cut:]
    # Items older than the state's own window count as dropped too: the projection reads
    # the same whether the state holds the whole history or only its window.
    history_dropped = state.history_dropped + cut
    results = list(state.last_results)
    results_dropped = 0
    texts = {"goal": state.goal, "criteria": list(state.acceptance_criteria)}
    pending = None
    if pending_index is not None and 0 <= pending_index < len(state.pending):
        pending = _pending_dict(state.pending[pending_index])

    def build(chars_cut: int) -> dict:
        data: dict = {"goal": texts["goal"], "acceptance_criteria": texts["criteria"]}
        data["history"] = [{"turn": h.turn, "summary": h.summary} for h in history]
        data["last_results"] = results
        data["untrusted"] = ["last_results"]
        if pending is not None:
            data["pending_proposal"] = pending
        data["replans"] = state.replans
        if history_dropped or results_dropped or chars_cut:
            data["truncated"] = {
                "history_dropped": history_dropped,
                "results_dropped": results_dropped,
                "chars_cut": chars_cut,
            }
        return data

    chars_cut = 0
    data = build(chars_cut)
    while len(canonical_json(data)) > max_chars:
        if history:
            history.pop(0)
            history_dropped += 1
        elif len(results) > 1:
            results.pop(0)
            results_dropped += 1
        else:
            excess = len(canonical_json(data)) - max_chars
            cut = _shorten_longest(results, texts, excess + len(TRUNCATION_MARK) + 64)
            if cut == 0:
                break  # nothing left to shorten: the caller's budget is below the skeleton
            chars_cut += cut
        data = build(chars_cut)
    return Projection(
        data=data,
        history_dropped=history_dropped,
        results_dropped=results_dropped,
        chars_cut=chars_cut,
    )


def _shorten_longest(results: list, texts: dict, wanted: int) -> int:
    candidates = [("result", i, text) for i, text in enumerate(results)]
    candidates.append(("goal", 0, texts["goal"]))
    candidates += [("criterion", i, text) for i, text in enumerate(texts["criteria"])]
    kind, index, text = max(candidates, key=lambda c: len(c[2]))
    keep = max(0, len(text) - wanted)
    if len(text) <= len(TRUNCATION_MARK) or keep >= len(text):
        return 0
    shortened = text[:keep] + TRUNCATION_MARK
    if kind == "result":
        results[index] = shortened
    elif kind == "goal":
        texts["goal"] = shortened
    else:
        texts["criteria"][index] = shortened
    return len(text) - keep


def _pending_dict(call: PendingCall) -> dict:
    return {
        "tool": call.tool,
        "description": call.description,
        "arguments": call.arguments,
        "intent": call.intent,
    }
