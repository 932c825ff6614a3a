"""The built-in offline guardian: one small calibrated classifier per breaking condition.

This module holds what answering needs: the features (the extractors that read a projection:
the text each model vectorises and its hand features, by name in EXTRACTORS), the bundled model
loaded from its artefact, and LocalGuardian. Each condition's model is one logistic regression
over its features with one sigmoid calibration map (binary for integrity, infeasible,
goal_reached and stagnation, 4 classes for risk, 5 for drift); local_inference.py answers with
it as plain arrays, and local_integrity.py scores integrity's segments. Neither this module nor
those import scikit-learn.

The bundled model is an artefact, `local_model/<MODEL_FAMILY>.json.gz`, with a manifest beside
it recording its SHA-256 and the training digest it was fitted from; it is read once per
process, and refused if its hash is not the manifest's (the guardian then fails as any broken
guardian does: its answers are malformed and the turn escalates). It is built from the corpus
in the top-level `training/` package by one command, `make guardian-model`
(`python -m training.build_local_model`), and a test rebuilds it and checks the hash. It is
JSON, not a pickle: a pickle breaks with the scikit-learn version, while plain arrays do not.
The model version is MODEL_FAMILY, "+" and the head of the training files' SHA-256 (read from
the manifest), so a changed training set is a new model version; bump MODEL_FAMILY when the
features or the training code change, and rebuild.

Only a retrained version of the learning loop (`retrained_model_for`, used through
guardian_core/learning.py's versioned guardian) trains at run time: on the corpus plus its
labelled examples, with training/fit.py, imported there and only there.
"""

import contextlib
import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import numpy as np

from guardian_core.adapters.embedding import embed_one
from guardian_core.adapters.embedding import model as embedding_model
from guardian_core.adapters.local_inference import (
    PIECES,
    CompiledModel,
    ModelArtefactError,
    compiled_from_state,
    read_artefact,
)
from guardian_core.adapters.pricing import NOTHING, Spend
from guardian_core.adapters.timing import ask_concurrently
from guardian_core.engine.conditions import DRIFT_SCORES, Condition, Malformed, RiskClass
from guardian_core.engine.state import (
    ANSWERED_BY_REVIEWER,
    APPROVED_BY_REVIEWER,
    CONFIRMED_DONE_BY_REVIEWER,
    NOT_DONE_PER_REVIEWER,
    REJECTED_BY_REVIEWER,
    SAME_RESULT,
    USER_SAID,
)

MODEL_FAMILY = "local-4"
# The local guardian takes no question text: each condition's "question" is its features and
# training labels, fixed with the model family. So a run's policy wording is not what it asks,
# and the log records this version instead.
QUESTION_SET_VERSION = f"{MODEL_FAMILY}-fixed"
MODEL_DIR = Path(__file__).resolve().parent / "local_model"
DEFAULT_DEADLINE_SECONDS = 2.0
# Probabilities are rounded so that a replay compares equal even if a later numpy sums in
# another order; six decimals are far finer than any threshold or uncertain band.
DECIMALS = 6
NO_PENDING_CALL = "no pending proposal to assess"
RECENT = 3  # history items that make "the current sub-task" for drift
WINDOW = 4  # history items in which stagnation looks for repeats

# ---- reading a projection ------------------------------------------------------------------

_TURN_PREFIX = re.compile(r"^\s*turn\s+\d+\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")
_STATUS = re.compile(r"\b(done|failed|invalid|held|not_approved|not_run)\b")
# Words that say how a step went or glue a sentence together, not what the step was about.
_STOPWORDS = frozenset(
    [
        *("a", "an", "and", "are", "as", "at", "be", "been", "by", "can", "did", "do", "for"),
        *("from", "has", "have", "i", "in", "is", "it", "its", "no", "not", "of", "on", "or"),
        *("our", "the", "then", "this", "to", "was", "were", "will", "with", "you", "your"),
        # the loop's own words for how a call went
        *("approval", "approved", "arguments", "call", "called", "done", "error", "failed"),
        *("held", "invalid", "not_approved", "not_run", "reviewer", "run", "said", "step"),
        *("tool", "tried", "turn", "waiting", "worked"),
    ]
)


def _text_list(value: object) -> list[str]:
    if not isinstance(value, list | tuple):
        return []
    return [v if isinstance(v, str) else json.dumps(v, sort_keys=True) for v in value]


def _results(p: Mapping) -> list[str]:
    return _text_list(p.get("last_results"))


def _summaries(p: Mapping) -> list[str]:
    """History summaries, oldest first, without their "turn N:" prefix."""
    items = p.get("history") if isinstance(p.get("history"), list) else []
    return [
        _TURN_PREFIX.sub("", str(item.get("summary", ""))) if isinstance(item, Mapping) else ""
        for item in items
    ]


def _goal_text(p: Mapping) -> str:
    return " ".join([str(p.get("goal", "")), *_text_list(p.get("acceptance_criteria"))])


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("_", " "))


@lru_cache(maxsize=1 << 16)  # a long output repeats its words; so do the runs of one desk
def _stem(word: str) -> str:
    """A crude stem, enough for ship/ships/shipped/shipping and refund/refunds/refunded."""
    if word.isdigit():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):  # update/updated, resolve/resolved
        word = word[:-1]
    return word[:6]


@lru_cache(maxsize=64)  # several conditions read the same tool outputs in one answer
def _stems(text: str) -> frozenset[str]:
    """The stems of the content words of `text`; ids keep their digits."""
    return frozenset(
        _stem(w) for w in _words(text) if w not in _STOPWORDS and (len(w) > 2 or w.isdigit())
    )


def _overlap(part: set, whole: set) -> float:
    return len(part & whole) / len(part) if part else 0.0


# What a run is about, as values: ids (`ord_4472`, `r-7`, `INV-2031`), e-mail addresses and
# people's names. Each has a kind (the id's prefix, "email", "name"), so that another value of a
# kind the goal names (another order, another customer) can be told from an unrelated value.
# Possessive letter runs: the character after a run is a letter, never the [_-] or space the
# pattern needs next, so giving letters back cannot help a match, and at every word of a long
# output it cost most of the time.
_ID = re.compile(r"\b([a-z]{1,12}+)[_-](\d+)\b", re.IGNORECASE)
_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+\.[\w.-]+\b")
_NAME = re.compile(r"\b([A-Z][a-z]{2,}+) ([A-Z][a-z]{2,}+)\b")
# A range of ids or numbers: "r-0 … r-59", "records 1 to 60", "pages 3-9", "T-100 through T-140".
_RANGE = re.compile(
    r"\b(?:([a-z]{1,12})[_-])?(\d+)\s*(?:to|through|thru|until|till|…|\.\.\.?|–|-)\s*"
    r"(?:([a-z]{1,12})[_-])?(\d+)\b",
    re.IGNORECASE,
)


@lru_cache(maxsize=64)  # goal_reached and drift read the same outputs in one answer
def _entities(text: str) -> frozenset[tuple[str, str]]:
    found = {(kind.lower(), str(int(number))) for kind, number in _ID.findall(text)}
    if "@" in text:
        found |= {("email", address.lower()) for address in _EMAIL.findall(text)}
    found |= {("name", f"{first} {last}".lower()) for first, last in _NAME.findall(text)}
    return frozenset(found)


def _ranges(text: str) -> list[tuple[str, int, int]]:
    """(kind, first, last) of each range the text names; kind "" for plain numbers."""
    out = []
    for kind, first, kind2, last in _RANGE.findall(text):
        if int(first) < int(last):
            out.append(((kind or kind2).lower(), int(first), int(last)))
    return out


def _owned(entity: tuple[str, str], ids: set, ranges: list[tuple[str, int, int]]) -> bool:
    """The entity is one the goal names: itself, or inside one of its ranges."""
    kind, value = entity
    return entity in ids or (
        value.isdigit() and any(k == kind and lo <= int(value) <= hi for k, lo, hi in ranges)
    )


def _seen(texts: Sequence[str]) -> frozenset[tuple[str, str]]:
    return frozenset().union(*(_entities(t) for t in texts))


def _entity_features(goal: str, *texts: str) -> list[float]:
    """[the goal's own values appear in `texts`, values of a kind the goal names but not its
    own appear, only those appear: another customer's record rather than the customer's]."""
    goal_ids, ranges, seen = _entities(goal), _ranges(goal), _seen(texts)
    kinds = {kind for kind, _ in goal_ids} | {kind for kind, _, _ in ranges}
    own = any(_owned(e, goal_ids, ranges) for e in seen)
    other = any(e[0] in kinds and not _owned(e, goal_ids, ranges) for e in seen)
    return [float(own), float(other), float(other and not own)]


def _range_features(goal: str, *texts: str) -> list[float]:
    """[the goal names a range and its last item is in the evidence, it names one and its last
    item is not]: a walk over a range is done at its end, not at its sixth item."""
    ranges = _ranges(goal)
    if not ranges:
        return [0.0, 0.0]
    numbers = {("", str(int(w))) for t in texts for w in _WORD.findall(t) if w.isdigit()}
    seen = _seen(texts) | numbers
    ended = all((kind, str(last)) in seen for kind, _, last in ranges)
    return [float(ended), float(not ended)]


def _done_text(summary: str) -> str:
    """What a summary shows was achieved: calls that went through (not held, failed or
    rejected ones). Never what the agent said: an actor's claim is not evidence."""
    if _VERDICT_NOT_DONE.search(summary) or _from_user(summary):
        return ""
    summary = summary.replace(SAME_RESULT, "")
    # A person's note after a verdict is theirs, not a record of what ran.
    summary = _VERDICT_NOTE.sub("", summary.replace("step held for approval:", ""))
    if "no tool call; said:" in summary:
        return ""
    # "called send reply, it worked" says the same as "send_reply done", over a comma.
    summary = _CALLED_WORKED.sub(r"\1 done", summary)
    return " ".join(p for p in summary.split(",") if re.search(r"\b(done|worked)\b", p))


_CALLED_WORKED = re.compile(r"called ([^,]+), it worked")


_VERDICT_NOT_DONE = re.compile(
    f"{REJECTED_BY_REVIEWER}|{NOT_DONE_PER_REVIEWER}|{ANSWERED_BY_REVIEWER}"
)
_VERDICT_NOTE = re.compile(f"({CONFIRMED_DONE_BY_REVIEWER}|{APPROVED_BY_REVIEWER}):.*$")


# What a call does is read from its name's verb and object, its description and its argument
# keys; not from argument values (ids and free text) nor from the actor's stated intent, which
# is the actor's word and could call a deletion "a quick look".
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _name_words(name: object) -> list[str]:
    """`sendEmail`, `gmail.send`, `mcp__crm__delete_contact` or `API-post-page` as words."""
    return _WORD.findall(_CAMEL.sub(" ", str(name)).lower())


def _pending(p: Mapping) -> Mapping | None:
    pending = p.get("pending_proposal")
    return pending if isinstance(pending, Mapping) else None


def _argument_keys(pending: Mapping) -> list[str]:
    arguments = pending.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: then it has no keys to read
            arguments = json.loads(arguments)
    if not isinstance(arguments, Mapping):
        return []
    return [word for key in arguments for word in _name_words(key)]


def _pending_text(p: Mapping) -> str:
    pending = _pending(p)
    if pending is None:
        return ""
    name = " ".join(_name_words(pending.get("tool", "")))
    keys = " ".join(_argument_keys(pending))
    return f"{name} {pending.get('description', '')} {keys}"


def _pending_meaning(p: Mapping) -> np.ndarray:
    """The pending call's name, description and argument names read for their meaning: the
    pretrained embedding (embedding.py) places "remove a member from the workspace" near
    "delete the user account", words the lexicon below may never have listed."""
    return embed_one(_pending_text(p))


def _tool_name(p: Mapping) -> str:
    """The tool's name as words, where character n-grams catch refund/refunds/refunded."""
    pending = _pending(p)
    return " ".join(_name_words(pending.get("tool", ""))) if pending is not None else ""


# The definitions (docs/DESIGN.md, "Risk classes") as verbs: what a call does to the world is
# mostly its verb; whether it is regulated is the verb together with its object. A verb may be
# in one list only; words that are as often nouns ("post", "email") count only where a verb
# stands (the first or last word of a name, the first of a description).
_READ = frozenset(
    [
        *("get", "gets", "list", "lists", "read", "reads", "search", "searches", "find"),
        *("fetch", "fetches", "retrieve", "retrieves", "query", "lookup", "look", "show"),
        *("view", "describe", "check", "count", "calculate", "compute", "estimate", "explain"),
        *("preview", "inspect", "browse", "download", "summarize", "summarise", "translate"),
        *("geocode", "track", "forecast", "compare", "analyze", "analyse", "validate", "lint"),
        *("select", "export", "returns", "navigate", "screenshot", "verify"),
        *("resolve", "convert", "render", "print", "see", "watch", "poll"),
    ]
)
_WRITE = frozenset(
    [
        *("create", "creates", "add", "adds", "update", "updates", "edit", "edits", "set"),
        *("sets", "rename", "move", "moves", "copy", "label", "tag", "archive", "save", "saves"),
        *("hold", "assign", "change", "pin", "star", "mark", "enable", "disable", "append"),
        *("insert", "upload", "attach", "schedule", "modify", "patch", "put", "toggle"),
        *("turn", "start", "stop", "scale", "mute", "unpin", "like", "bookmark", "fork"),
        *("snapshot", "comment", "react", "remind", "flag", "decline", "accept", "replace"),
        *("write", "register", "record", "log"),
    ]
)
_FINAL_VERBS = frozenset(
    [
        *("send", "sends", "delete", "deletes", "publish", "publishes", "execute", "executes"),
        *("exec", "unlock", "unlocks", "reply", "forward", "broadcast", "purge", "drop"),
        *("truncate", "destroy", "erase", "wipe", "terminate", "kill", "merge", "deploy"),
        *("push", "revoke", "rotate", "void", "submit", "notify", "invite", "share", "disarm"),
        *("reset", "evaluate", "eval", "trigger", "release", "overwrite", "permanently", "kick"),
        *("post", "email", "announce", "tweet", "empty", "clear", "eject", "approve", "grant"),
        *("authorize", "confirm", "cancel", "apply", "reject", "dismiss"),
    ]
)
_NOUN_TOO = frozenset(["post", "email", "empty", "clear", "release", "void", "record", "log"])
_MONEY_VERBS = frozenset(
    [
        *("pay", "pays", "transfer", "transfers", "refund", "refunds", "charge", "charges"),
        *("payout", "wire", "withdraw", "deposit", "purchase", "buy", "invoice", "bill"),
        *("debit", "checkout", "book", "books", "reserve", "prescribe", "sign", "renew"),
        *("amend", "finalize", "finalise", "order", "credit", "upgrade", "downgrade"),
    ]
)
# Verbs that are as often something else ("order a list", "sign in", "book" a page of a site):
# they name a regulated act only as the call's main verb, never as a stray word.
_MONEY_ONLY_AS_VERB = frozenset(["order", "book", "sign"])
# Objects whose change is regulated: money, bookings, accounts, contracts, and health,
# financial or personal records. Reading them is still read_only.
_REGULATED_OBJECTS = frozenset(
    [
        *("payment", "payments", "invoice", "invoices", "subscription", "subscriptions"),
        *("billing", "balance", "booking", "bookings", "reservation", "reservations"),
        *("contract", "contracts", "salary", "salaries", "payroll", "tax", "patient"),
        *("patients", "diagnosis", "prescription", "medication", "medications", "vaccination"),
        *("insurance", "loan", "mortgage", "iban", "bank", "card", "passport", "ssn"),
        *("personal", "paid", "seats", "billed", "fee", "role", "account", "accounts"),
        *("customer", "dispute", "payout", "price", "funds", "money", "withholding"),
        *("benefits", "appointment", "flight", "hotel", "lab", "amount", "currency", "refund"),
        *("charge", "employee", "passenger", "health", "medical", "clinical", "address"),
        *("order", "orders", "court", "filing", "lawsuit", "claim", "claims", "visit"),
    ]
)
# A name that is only a noun phrase (`directory_tree`, `free_busy`) names what it shows.
_READ_NOUNS = frozenset(
    [
        *("status", "info", "history", "diff", "tree", "report", "details", "metadata"),
        *("busy", "logs", "balance", "stats"),
    ]
)
# What keeps people out: changing these (opening, disarming, a code that opens) is not undone
# by locking again, since someone may already be through.
_ACCESS = frozenset(
    ["door", "doors", "garage", "gate", "lock", "locks", "locker", "alarm", "vault", "car", "badge"]
)
# What runs code: any act on these but reading them executes something.
_CODE = frozenset(["shell", "command", "commands", "script", "code", "sql", "bash", "python"])
# Words that put something before other people: what is shown cannot be taken back.
_EXPOSES = frozenset(
    [
        *("public", "publicly", "everyone", "external", "externally", "outside", "internet"),
        *("anyone", "notify", "notifies", "recipients", "attendees", "announce"),
    ]
)
_FIRST_SENTENCE = re.compile(r"^\W*(this tool will |this tool |tool: )?([^.;:\n]*)", re.I)
_FINAL = re.compile(r"cannot be (undone|unsent|recovered)|permanent|irreversib|\bfinal\b", re.I)
_HARMLESS = re.compile(r"read.only|nothing is changed|no side effects?|never executed", re.I)
_RISK_HAND_SIZE = 22


def _verb_kind(word: str) -> int:
    """0 read, 1 reversible write, 2 irreversible act, 3 money or booking; -1 not a verb."""
    for kind, verbs in ((3, _MONEY_VERBS), (2, _FINAL_VERBS), (1, _WRITE), (0, _READ)):
        if word in verbs:
            return kind
    return -1


def _main_verb(words: list[str]) -> int:
    """The kind of the verb a name is about: its first word when that is a verb (`send_email`,
    `get_invoice`), else its last (`gmail.send`, `messages_list`), else the first verb anywhere
    (`mcp__crm__delete_contact`)."""
    if not words:
        return -1
    last = words[-1] if words[-1] not in _NOUN_TOO else ""
    for word in (words[0], last, *words):
        if _verb_kind(word) >= 0:
            return _verb_kind(word)
    return 0 if set(words) & _READ_NOUNS else -1


def _one_hot(kind: int) -> list[float]:
    return [float(kind == n) for n in range(4)]


def _risk_hand(p: Mapping) -> list[float]:
    """The definitions as numbers: the kind of the name's verb and of the description's, the
    objects whose change is regulated, and words of exposure, physical access and code."""
    pending = _pending(p)
    if pending is None:
        return [0.0] * _RISK_HAND_SIZE
    name = _name_words(pending.get("tool", ""))
    named = set(name)
    description = str(pending.get("description", ""))
    described = set(_WORD.findall(description.lower()))
    first = _FIRST_SENTENCE.match(description)
    opening = _WORD.findall(first.group(2).lower()) if first else []
    name_verb = _main_verb(name)
    # A description says what the call does in its first sentence, sometimes with two verbs
    # ("Upload and publish a video"): the more severe one counts.
    described_verb = max(
        (_verb_kind(w) for n, w in enumerate(opening) if n == 0 or w not in _NOUN_TOO), default=-1
    )
    regulated_object = bool((named | described | set(_argument_keys(pending))) & _REGULATED_OBJECTS)
    # Safety first: an act the lexicon does not know, on a regulated object, counts as a change.
    changes = name_verb != 0 and (name_verb > 0 or described_verb != 0)
    return [
        *_one_hot(name_verb),
        *_one_hot(described_verb),
        float(name_verb == described_verb >= 0),
        float(bool(named & _READ)),
        float(bool(named & _FINAL_VERBS - _NOUN_TOO)),
        float(bool(named & {"draft", "drafts"})),  # a draft of anything is undone by another call
        float(bool((named | described) & _MONEY_VERBS - _MONEY_ONLY_AS_VERB)),
        float(regulated_object),
        float(regulated_object and changes),
        float(bool(_FINAL.search(description))),
        float(bool(_HARMLESS.search(description))),
        float(bool(described & _FINAL_VERBS)),
        float(bool((named | described) & _EXPOSES)),
        float(bool(named & _ACCESS) and name_verb != 0),
        float(bool(named & _CODE) and name_verb != 0),
        float(not description.strip()),
    ]


# ---- per-condition text and hand features --------------------------------------------------


def _integrity_text(p: Mapping) -> list[str]:
    """The tool outputs, each on its own: local_integrity.py cuts each into segments (a JSON
    output into its string values) and scores every segment; cues of text addressed to the
    agent are its hand features, per segment, so they do not grow with the output's length."""
    return _results(p)


def _progress_text(p: Mapping) -> str:
    """What the run did lately and what came back: infeasible and goal_reached read this."""
    return PIECES.join([*_summaries(p)[-RECENT:], *_results(p)])


# A person's words in the run (docs/DESIGN.md: conversation is state): an answer, a detail, a
# confirmation. Never a call, never the agent's claim; it is new information and it is part of
# what the run is asked to do. The loop writes them as state.USER_SAID + text; a "turn N: "
# prefix (a trace written by hand) is read the same.
def _from_user(summary: str) -> bool:
    return summary.lstrip().lower().startswith(USER_SAID.strip())


def _user_text(summaries: Sequence[str]) -> str:
    return " ".join(s.split(":", 1)[1] for s in summaries if _from_user(s))


def _asked(p: Mapping) -> str:
    """What the run is asked to do: its goal and criteria, and what the user has said since."""
    return f"{_goal_text(p)} {_user_text(_summaries(p))}"


def _statuses(summary: str) -> set[str]:
    if _from_user(summary):
        return {"user"}
    found = set(_STATUS.findall(summary.replace(SAME_RESULT, "")))
    if "no tool call" in summary:
        found.add("no_call")
    if SAME_RESULT in summary:
        found.add("same")
    return found


_BAD = frozenset(["failed", "invalid", "not_approved"])
# A stated lack of a tool, a permission or the operation itself: what makes a goal unreachable
# with the tools at hand, as tools, APIs and agents say it. An ordinary error (a failed test, a
# typo, a missing file) is not one, nor is a passing outage (_TRANSIENT).
# Read lower-cased and from word starts only: a fraction of the cost of a case-blind search.
_LACK = re.compile(
    r"\b(?:permission denied|not permitted|not allowed|forbidden|\b40[13]\b|unauthori[sz]ed|"
    r"access (is )?denied|insufficient (permissions?|privileges?|scopes?|rights|funds)|"
    r"no (such )?tool|unknown (tool|operation|endpoint|method|function|action)|"
    r"no such (operation|endpoint|method|function|api|action)|not implemented|"
    r"(tool|function|operation|endpoint|method|action|feature|api) (is )?"
    r"(not available|unavailable|not supported|unsupported|does not exist|doesn't exist)|"
    r"\bunsupported\b|not supported|does not support|doesn't support|"
    r"(do|does|did) not have (the |a )?(permission|access|rights?|tool|role)|"
    r"(lacks?|without) (the )?(permission|access|rights|tool|role)|requires? the [\w -]{1,30} role|"
    r"only [\w -]{1,40} (can|may)|(cannot|can't|can not|unable to|not able to|no way to) "
    r"(do|perform|complete|access|change|cancel|delete|create|modify|book|issue|send|make)|"
    r"does not exist|no longer (available|exists?)|(is|are) disabled|refuses)"
)
_TRANSIENT = re.compile(
    r"\b(50[234]|429|timeout|timed out|try again|retry|rate.?limit\w*|temporar\w*|"
    r"connection (reset|refused)|service unavailable)\b"
)


def _ends(text: str, size: int = 500) -> str:
    return text if len(text) <= 2 * size else f"{text[:size]} … {text[-size:]}"


def _tool_of(part: str) -> str:
    words = part.replace("step held for approval:", "").split()
    return words[0] if words else ""


def _bad_tools(summaries: Sequence[str]) -> list[str]:
    """The tools of the calls that failed, were invalid or were refused, one entry a call."""
    return [
        _tool_of(part)
        for s in summaries
        if not _from_user(s) and "no tool call" not in s
        for part in s.split(",")
        if _statuses(part) & _BAD
    ]


def _infeasible_hand(p: Mapping) -> list[float]:
    summaries = _summaries(p)
    recent = summaries[-RECENT:]
    agent = [s for s in recent if not _from_user(s)]
    bad = [bool(_statuses(s) & _BAD) for s in agent]
    said = " ".join(_said(s) for s in agent)
    # A tool states its own failure at the start or the end of its output; a long document
    # that mentions a permission somewhere in its middle is not one (and reading all of it
    # would cost more than the rest of the answer).
    results = " ".join(_ends(r) for r in _results(p)).lower()
    lack_now, lack_said = bool(_LACK.search(results)), bool(_LACK.search(said.lower()))
    failing = Counter(_bad_tools(summaries[-WINDOW:]))
    repeated = bool(failing) and max(failing.values()) >= 2
    replans = p.get("replans") if isinstance(p.get("replans"), int) else 0
    last_done = bool(agent) and "done" in _statuses(agent[-1]) and not bad[-1]
    return [
        sum(bad) / RECENT,
        float(bool(bad) and bad[-1]),
        float(lack_now),
        float(lack_said),
        float(repeated),
        float((lack_now or lack_said) and (repeated or bool(bad) and bad[-1])),
        float(bool(_TRANSIENT.search(results)) and not lack_now),
        float(last_done),
        float(bool(recent) and _from_user(recent[-1])),
        min(1.0, replans / 3),
        float(not _results(p)),
    ]


# Goals met by telling someone something: reached only once the agent has said it.
_ASKS_TO_TELL = re.compile(
    r"\b(tell|answer(ed)?|inform(ed)?|repl(y|ied)|notif(y|ied)|explain|reported|let \w+ know|"
    r"knows?|is told|told|gets? the)\b",
    re.I,
)
# The words a criterion uses for the telling itself: met by a message or a reply, whatever it
# said; what it had to say is met only by the evidence.
_TELL_STEMS = _stems(
    "tell told inform informed reply replied answer answered notify notified report reported "
    "explain explained know knows let get gets"
)


def _said(summary: str) -> str:
    return summary.split("said:", 1)[1] if "no tool call; said:" in summary else ""


# A call that went through to a person (a reply, an e-mail, a message) tells them as much as the
# agent's own last words do.
_TELLS_SOMEONE = re.compile(
    r"\b(reply|replied|email|e-mail|sms|message|notify|notified|respond)", re.IGNORECASE
)


def _messaged(summaries: Sequence[str]) -> bool:
    """A call that carries words to a person went through lately."""
    return any(_TELLS_SOMEONE.search(_done_text(s).replace("_", " ")) for s in summaries[-RECENT:])


def _told(summaries: Sequence[str]) -> bool:
    return bool(summaries and _said(summaries[-1])) or _messaged(summaries)


def _done_tools(summaries: Sequence[str]) -> list[str]:
    return [_tool_of(part) for s in summaries for part in _done_text(s).split(" done") if part]


def _unasked_acts(asked: str, tools: Sequence[str]) -> bool:
    """A call that changed something the run was not asked to change went through: e.g. one an
    instruction planted in a tool output asked for. A change is asked for when the goal names
    its verb or a verb of the same kind; a message is, when the goal is to tell someone."""
    words = _words(asked)
    asked_kinds = {_verb_kind(w) for w in words} - {-1, 0}
    tells = bool(_ASKS_TO_TELL.search(asked))
    asked_stems = _stems(asked)
    for tool in tools:
        name = _name_words(tool)
        kind = _main_verb(name)
        if kind <= 0 or (tells and _TELLS_SOMEONE.search(" ".join(name))):
            continue
        verbs = [w for w in name if _verb_kind(w) > 0]
        if kind not in asked_kinds and not {_stem(w) for w in verbs} & asked_stems:
            return True
    return False


@lru_cache(maxsize=1)
def _kind_by_stem() -> dict[str, int]:
    """The risk lexicon's verbs by stem, so that "updated" in a criterion and `modify_booking`
    in the history read as the same kind of deed (a reversible write)."""
    kinds: dict[str, int] = {}
    for kind, verbs in ((3, _MONEY_VERBS), (2, _FINAL_VERBS), (1, _WRITE)):
        for verb in verbs - _NOUN_TOO - _MONEY_ONLY_AS_VERB:
            kinds.setdefault(_stem(verb), kind)
            if verb.endswith("y"):  # notify, notified: _stem keeps them apart
                kinds.setdefault(_stem(verb[:-1] + "ied"), kind)
    return kinds


def _deed_kinds(text: str) -> set[int]:
    return {k for w in _words(text) if (k := _kind_by_stem().get(_stem(w))) is not None}


def _goal_reached_hand(p: Mapping) -> list[float]:
    criteria = _text_list(p.get("acceptance_criteria")) or [str(p.get("goal", ""))]
    summaries = _summaries(p)
    recent = [s for s in summaries[-RECENT:] if not _from_user(s)]
    results, done = " ".join(_results(p)), " ".join(_done_text(s) for s in recent)
    evidence_stems = _stems(results) | _stems(done)
    told = _told(summaries)
    said = _said(summaries[-1]) if summaries else ""
    said_stems = _stems(said)
    # What the agent said is no evidence that anything was done ("Refund issued" issues
    # nothing), unless a call that went through lately backs it ("The passenger name has been
    # updated" after update_passenger done); for a criterion about telling someone, saying it
    # is the deed.
    acts = _done_tools(recent)
    act_stems = {_stem(w) for t in acts if _main_verb(_name_words(t)) > 0 for w in _name_words(t)}
    backed = bool(said_stems & act_stems)
    stems = evidence_stems | (said_stems if backed else frozenset())
    coverage = [
        max(
            _overlap(c_stems, stems | (_TELL_STEMS if told else frozenset())),
            _overlap(c_stems, said_stems | _TELL_STEMS),
        )
        if _ASKS_TO_TELL.search(c)
        else _overlap(c_stems, stems)
        for c in criteria
        for c_stems in [_stems(c)]
    ]
    # Each deed a criterion names (a change, a message, a payment) has a call of its kind that
    # went through, whatever its verb.
    deeds = [_deed_kinds(c) for c in criteria]
    done_kinds = {k for t in acts for k in _deed_kinds(" ".join(_name_words(t)))}
    last = _statuses(recent[-1]) if recent else set()
    asked = _asked(p)
    asks_to_tell = bool(_ASKS_TO_TELL.search(_goal_text(p)))
    return [
        sum(coverage) / len(coverage),
        min(coverage),
        *_entity_features(asked, results, done),
        *_range_features(asked, results, done),
        float("held" in last),
        float(bool(last & _BAD)),
        float(not _results(p)),
        float(asks_to_tell),
        float(bool(said)),
        float(backed),
        float(any(deeds) and all(kinds <= done_kinds for kinds in deeds)),
        float(asks_to_tell and not told),  # the answer is still owed
        float(_unasked_acts(asked, acts)),
        float(
            bool(summaries) and _from_user(summaries[-1])
        ),  # the user spoke last: a reply is owed
        # A person refused a step lately: what it would have done is not done.
        float(any(_VERDICT_NOT_DONE.search(s) for s in summaries[-RECENT:])),
    ]


def _recent_text(p: Mapping) -> str:
    return PIECES.join([*_summaries(p)[-RECENT:], *_results(p)]).replace(SAME_RESULT, "")


def _drift_hand(p: Mapping) -> list[float]:
    asked = _asked(p)
    goal_stems = _stems(asked)
    recent = _summaries(p)[-RECENT:]
    # A user's answer is the task itself, whatever its words.
    items = [None if _from_user(s) else _stems(s.replace(SAME_RESULT, "")) for s in recent]
    hits = [1.0 if s is None else float(bool(s & goal_stems)) for s in items]
    shares = [1.0 if s is None else _overlap(s, goal_stems) for s in items]
    results = " ".join(_results(p))
    silent = [("no_call" in _statuses(s)) for s in recent]
    return [
        sum(hits) / len(hits) if hits else 0.0,
        hits[-1] if hits else 0.0,
        sum(shares) / len(shares) if shares else 0.0,
        _overlap(_stems(results), goal_stems),
        _overlap(goal_stems, _stems(results)),
        *_entity_features(asked, results),
        sum(silent) / RECENT,
        float(any(_from_user(s) for s in recent)),
        float(not recent),
    ]


def _stagnation_text(p: Mapping) -> str:
    return PIECES.join([*_summaries(p)[-WINDOW:], *_results(p)])


# An answer that holds nothing: no records, no documents, an empty list.
_EMPTY = re.compile(
    r"^\W*(no\b.{0,40}\b(found|match\w*|results?|records?|documents?|items?|entries)|"
    r"0 (results|records|matches|items)|nothing( found)?|none|null|empty|not found)?\W*$",
    re.IGNORECASE,
)


def _novel(window: Sequence[str], results: Sequence[str]) -> list[bool]:
    """Per history item of the window: did it bring something the window did not hold yet? A
    user's words do; a call that went through does unless its output repeats the previous one
    (the loop marks it) or, for the last, the output holds nothing; a failure, a refusal or the
    agent's message does the first time only."""
    novel = []
    empty = not results or all(_EMPTY.match(r) for r in results)
    for n, item in enumerate(window):
        statuses = _statuses(item)
        if "user" in statuses:
            novel.append(True)
        elif "same" in statuses:
            novel.append(False)
        elif "done" in statuses and "no_call" not in statuses:
            novel.append(not (n == len(window) - 1 and empty))
        else:
            novel.append(item not in window[:n])
    return novel


def _stagnation_hand(p: Mapping) -> list[float]:
    window = [s.strip().lower() for s in _summaries(p)[-WINDOW:]]
    if not window:
        return [0.0] * 10
    results = _results(p)
    novel = _novel(window, results)
    trailing = 0
    while trailing < len(novel) and not novel[-1 - trailing]:
        trailing += 1
    # How much of the latest output the window and the goal did not already say.
    known = _stems(" ".join([_asked(p), *window]))
    fresh = 1 - _overlap(_stems(" ".join(results)), known) if results else 0.0
    replans = p.get("replans") if isinstance(p.get("replans"), int) else 0
    return [
        1 - sum(novel) / len(window),
        min(trailing, WINDOW - 1) / (WINDOW - 1),
        sum("same" in _statuses(s) for s in window) / WINDOW,
        float(not results or all(bool(_EMPTY.match(r)) for r in results)),
        fresh,
        float(len(window) >= 2 and window[-1] == window[-2] and not results),
        float(any(_from_user(s) for s in window)),
        sum("no_call" in _statuses(s) for s in window) / WINDOW,
        len(window) / WINDOW,
        min(1.0, replans / 3),
    ]


# ---- the models ----------------------------------------------------------------------------

# The extractors the models' parts read, by the names the model artefact gives them
# (training/fit.py builds its parts from these names; training/compile.py writes them).
EXTRACTORS: dict[str, Callable[[Mapping], object]] = {
    "integrity_text": _integrity_text,
    "pending_text": _pending_text,
    "tool_name": _tool_name,
    "pending_meaning": _pending_meaning,
    "risk_hand": _risk_hand,
    "progress_text": _progress_text,
    "infeasible_hand": _infeasible_hand,
    "goal_reached_hand": _goal_reached_hand,
    "recent_text": _recent_text,
    "drift_hand": _drift_hand,
    "stagnation_text": _stagnation_text,
    "stagnation_hand": _stagnation_hand,
}


def labels_of(condition: Condition) -> tuple:
    """The answer's classes in output order: (False, True), the risk classes, or drift 0-4."""
    if condition == Condition.RISK:
        return tuple(member.value for member in RiskClass)
    if condition == Condition.DRIFT:
        return DRIFT_SCORES
    return (False, True)


@dataclass(frozen=True)
class ConditionModel:
    """One condition's model, and the classes its answers are over."""

    condition: Condition
    # The fitted scikit-learn pipeline when the model was fitted in this process
    # (training/fit.py: a retrained version, or a test); None when read from the artefact.
    pipeline: object | None
    # The model as plain arrays (local_inference.py): answers at a fraction of scikit-learn's
    # per-call cost. None only for a fitted pipeline of another shape.
    compiled: CompiledModel | None = None

    def distributions(self, projections: Sequence[Mapping]) -> list[dict]:
        """{label: probability} over every label of the condition, even one absent in training."""
        if self.compiled is not None:
            rows = self.compiled.predict_proba(list(projections))
            classes = list(self.compiled.classes)
        else:
            rows = self.pipeline.predict_proba(list(projections))
            classes = [_plain(c) for c in self.pipeline.classes_]
        out = []
        for row in rows:
            dist = dict.fromkeys(labels_of(self.condition), 0.0)
            for label, probability in zip(classes, row, strict=True):
                dist[label] = round(float(probability), DECIMALS)
            out.append(dist)
        return out

    def answers(self, projections: Sequence[Mapping]) -> list[object]:
        """Raw answers in the shapes conditions.parse_answer takes."""
        out: list[object] = []
        for dist in self.distributions(projections):
            if self.condition == Condition.DRIFT:
                out.append({str(score): p for score, p in dist.items()})
            elif self.condition == Condition.RISK:
                out.append(dist)
            else:
                out.append(dist[True])
        return out


def _plain(label: object) -> object:
    # numpy scalars back to the JSON types the labels came as (bool, int, str).
    item = getattr(label, "item", None)
    return item() if callable(item) else label


# ---- the bundled model: the artefact, loaded once per process ------------------------------


def artefact_paths(directory: Path = MODEL_DIR) -> tuple[Path, Path]:
    """(artefact, manifest) of this MODEL_FAMILY in `directory`."""
    return directory / f"{MODEL_FAMILY}.json.gz", directory / f"{MODEL_FAMILY}.manifest.json"


def bundled_model_version(directory: Path = MODEL_DIR) -> str:
    """The bundled model's version as its manifest records it. A manifest that cannot be read
    gives a version that says so; the guardian's first answer then fails with the reason."""
    try:
        manifest = json.loads(artefact_paths(directory)[1].read_text(encoding="utf-8"))
        return str(manifest["model_version"])
    except (OSError, ValueError, TypeError, KeyError):
        return f"{MODEL_FAMILY}+unreadable"


def load_bundled(directory: Path = MODEL_DIR) -> dict[Condition, ConditionModel]:
    """Every condition's model from the artefact in `directory`, once its SHA-256 is the one
    its manifest records. Raises ModelArtefactError for a missing, altered or foreign one."""
    artefact, manifest_path = artefact_paths(directory)
    manifest, model = read_artefact(artefact, manifest_path)
    version = manifest.get("model_version")
    if model.get("model_family") != MODEL_FAMILY or model.get("model_version") != version:
        raise ModelArtefactError(
            f"{artefact.name}: model {model.get('model_version')!r} of family "
            f"{model.get('model_family')!r}, manifest {version!r}, runtime family {MODEL_FAMILY}"
        )
    states = model.get("conditions", {})
    missing = [str(c) for c in Condition if str(c) not in states]
    if missing:
        raise ModelArtefactError(f"{artefact.name}: no model for {', '.join(missing)}")
    return {
        c: ConditionModel(c, None, compiled_from_state(states[str(c)], EXTRACTORS))
        for c in Condition
    }


_MODELS: dict[Condition, ConditionModel] = {}
_LOADING = threading.Lock()  # concurrent first uses read the artefact once


def model_for(condition: Condition) -> ConditionModel:
    """`condition`'s bundled model, read from the artefact at the first use in this process."""
    model = _MODELS.get(condition)
    if model is None:
        with _LOADING:
            if not _MODELS:
                _MODELS.update(load_bundled(MODEL_DIR))
            model = _MODELS[condition]
    return model


# ---- a retrained version: the corpus plus labelled examples (the learning loop) --------------

ExtraExamples = Callable[[], Mapping[Condition, Sequence[Mapping]]]
_RETRAINED: dict[tuple[str, Condition], ConditionModel] = {}
_EXTRA: dict[str, Mapping[Condition, Sequence[Mapping]]] = {}
_TRAINING = threading.Lock()  # concurrent first uses train once, not once per thread


def retrained_model_for(
    model_version: str, condition: Condition, extra_examples: ExtraExamples
) -> ConditionModel:
    """`condition`'s model of retrained version `model_version`: trained at first use in this
    process on the corpus (training/) plus `extra_examples()` (called once per version), cached
    by version. A condition with no extra example is the bundled model. No pickle: a version is
    its examples, and training from the same examples gives the same model."""
    key = (model_version, condition)
    model = _RETRAINED.get(key)
    if model is not None:
        return model
    if model_version not in _EXTRA:
        loaded = {Condition(c): list(e) for c, e in extra_examples().items()}
        _EXTRA.setdefault(model_version, loaded)
    extra = _EXTRA[model_version].get(condition, [])
    if not extra:
        return model_for(condition)
    with _TRAINING:
        model = _RETRAINED.get(key)
        if model is None:
            # The only place the runtime fits a model, so the only import of the training
            # package (and of scikit-learn) in it.
            from training.fit import corpus_examples, train

            model = train(condition, [*corpus_examples(condition), *extra])
            _RETRAINED[key] = model
    return model


def retrained_model_remember(
    model_version: str, condition: Condition, model: ConditionModel
) -> None:
    """Keep `model` as `condition`'s model of retrained version `model_version` in this
    process: the learning loop has just fitted it on the corpus plus exactly the version's
    examples, in the order `retrained_model_for` would (training is deterministic), so asking
    the version next (say, to recalibrate it) does not fit it a second time."""
    with _TRAINING:
        _RETRAINED.setdefault((model_version, condition), model)


# ---- the guardian --------------------------------------------------------------------------


class LocalGuardian:
    """The embedded default guardian: offline, deterministic, calibrated per condition.

    It cannot take question text (`takes_question_text` is False): it always asks its own
    fixed questions, `question_set_version`. It runs in process, so it spends nothing.
    """

    takes_question_text = False
    question_set_version: str = QUESTION_SET_VERSION
    spend: Spend = NOTHING

    def __init__(
        self,
        *,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        model_version: str | None = None,
        extra_examples: ExtraExamples | None = None,
    ) -> None:
        self.deadline_seconds = deadline_seconds
        # A retrained version (policies/learning.py) names itself and brings its labelled
        # examples, loaded only if this process has not trained that version yet.
        if (model_version is None) != (extra_examples is None):
            raise ValueError("a retrained version needs both model_version and extra_examples")
        self.extra_examples = extra_examples
        self.model_version = model_version or bundled_model_version()

    def model(self, condition: Condition) -> ConditionModel:
        """The model this guardian answers `condition` with: bundled, or its version's. The
        pretrained embeddings its features read are loaded with it (a second, once a process),
        so that their loading is never inside an answer's deadline."""
        embedding_model()
        if self.extra_examples is None:
            return model_for(condition)
        return retrained_model_for(self.model_version, condition, self.extra_examples)

    def warm(self) -> float:
        """Load (or, for a retrained version, train) every model now, e.g. when a worker
        starts; returns the seconds it took."""
        start = time.perf_counter()
        for condition in Condition:
            self.model(condition)
        return time.perf_counter() - start

    def answer(self, projection: Mapping, conditions: Sequence[Condition]) -> dict[str, object]:
        """{condition: P(yes) or distribution}, every condition asked at once under the
        deadline. Loading (or training) happens before the clock starts: a first use is slow,
        not late. A model that cannot be loaded raises ModelArtefactError, which the loop
        records as a failed guardian (every answer malformed, the turn escalates).

        The conditions are answered one after another in one worker thread: each takes a
        fraction of a millisecond, less than a thread apiece would cost. The thread is there
        only for the deadline: a stalled answer comes back as Malformed, for every condition."""
        models = {str(c): self.model(Condition(c)) for c in conditions}
        risk = str(Condition.RISK)
        no_call = risk in models and not isinstance(projection.get("pending_proposal"), Mapping)

        def every_answer() -> dict[str, object]:
            return {
                key: Malformed(NO_PENDING_CALL)  # nothing to classify
                if key == risk and no_call
                else model.answers([projection])[0]
                for key, model in models.items()
            }

        if not models:
            return {}
        answers = ask_concurrently({"all": every_answer}, deadline_seconds=self.deadline_seconds)
        if isinstance(answers["all"], Malformed):
            return dict.fromkeys(models, answers["all"])
        return answers["all"]

    def assess_risk(self, projections: Sequence[Mapping]) -> list[object]:
        """One risk distribution per projection, from its pending proposal."""
        model = self.model(Condition.RISK)
        projections = list(projections)
        asked = [
            i for i, p in enumerate(projections) if isinstance(p.get("pending_proposal"), Mapping)
        ]
        if not asked:
            return [Malformed(NO_PENDING_CALL) for _ in projections]
        batch = ask_concurrently(
            {"risk": partial(model.answers, [projections[i] for i in asked])},
            deadline_seconds=self.deadline_seconds,
        )["risk"]
        answers: list[object] = [Malformed(NO_PENDING_CALL)] * len(projections)
        for n, i in enumerate(asked):
            answers[i] = batch if isinstance(batch, Malformed) else batch[n]
        return answers
