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


@dataclass(frozen=True)
class LoopState:
    """The single source of truth of a run. Never edited: each turn makes the next version."""

    goal: str
    acceptance_criteria: tuple[str, ...] = ()
    history: tuple[HistoryItem, ...] = ()
    last_results: tuple[str, ...] = ()  # tool outputs, verbatim and untrusted
    pending: tuple[PendingCall, ...] = ()
    replans: int = 0
    version: int = 0

    def to_dict(self) -> dict:
        return {
            "goal": self.goal,
            "acceptance_criteria": list(self.acceptance_criteria),
            "history": [{"turn": h.turn, "summary": h.summary} for h in self.history],
            "last_results": list(self.last_results),
            "pending": [_pending_dict(call) for call in self.pending],
            "replans": self.replans,
            "version": self.version,
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
    return replace(
        state,
        history=state.history + tuple(add_history),
        last_results=state.last_results if last_results is None else tuple(last_results),
        pending=state.pending if pending is None else tuple(pending),
        replans=state.replans + (1 if replanned else 0),
        version=state.version + 1,
    )


# How a person's verdict reads in the history. The guardian judges the run from what ran and
# what it returned; a verdict is part of that record (a rejected call never ran).
APPROVED_BY_REVIEWER = "approved by reviewer"
REJECTED_BY_REVIEWER = "rejected by reviewer"
CONFIRMED_DONE_BY_REVIEWER = "confirmed done by reviewer"
NOT_DONE_PER_REVIEWER = "not done per reviewer"
ANSWERED_BY_REVIEWER = "answered by reviewer"


def verdict_item(turn: int, *, subject: str, verdict: str, reason: str = "") -> HistoryItem:
    """The history item that records a person's verdict on turn `turn`, e.g.
    "turn 1: issue_refund rejected by reviewer: the parcel was insured"."""
    summary = f"turn {turn}: {subject} {verdict}"
    reason = " ".join(reason.split())
    if reason:
        summary += f": {reason[:300]}"
    return HistoryItem(turn, summary)


def state_hash(state: LoopState) -> str:
    """SHA-256 of the state's canonical JSON: equal states hash equal in any process."""
    return sha256_hex(state.to_dict())


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
    history_limit: int = 8,
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
    history_dropped = max(0, len(history) - history_limit)
    history = history[history_dropped:]
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
