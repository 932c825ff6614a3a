"""The local guardian's integrity features at answer time: tool outputs cut into segments, each
segment scored by the fitted segment classifier, the scores pooled.

A planted request is one or two sentences in an output of any length, so the question is asked
of every segment (a line, a sentence of a long line, a string value of a JSON document) and the
answer is pooled: the highest segment score and the mean of the two highest. Neither grows with
the length of an ordinary document the way a bag of words over the whole output does; the count
of segments is left out on purpose, since in public injection sets the injected texts are
shorter than benign ones, and a count taught the calibration that short means suspect.

A segment is read for its meaning (its pretrained embedding, embedding.py) and the CUES of text
addressed to the agent (and, in a model fitted with them, its words and word pairs).
`SegmentScorer` holds the fitted weights (read from the model artefact, or handed over by the
fitting code) and answers with plain arithmetic. How those weights are learnt from whole-output
labels (multiple-instance learning, out-of-fold scores for the calibration) is in
training/segments.py; this module is only what answering needs.
"""

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from guardian_core.adapters.embedding import embed

MAX_SEGMENT = 320  # characters; longer sentences are cut at word boundaries
FLOOR = -12.0  # the pooled score of an output with no text at all
POOLED = 2  # features per projection
MIN_WORDS = 3
CUE_WEIGHT = 5.0

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_LETTER = re.compile(r"[^\W\d_]")

# Cues of text addressed to the agent, written to be general, not to match this project's corpus:
# an AI addressed or named as the one to act, the agent's own instructions or answer spoken of,
# an attempt to replace the task, an act on accounts, money or data, a destination outside, a
# request for secrecy or haste, text hidden from a person, a fake turn marker, a demand on the
# form of the answer.
# A request on the form of the answer names a language; the list is long on purpose, so that a
# language the corpus never uses is still one.
_LANGUAGES = (
    r"french|german|spanish|italian|dutch|polish|portuguese|finnish|latin|pig latin|swedish|"
    r"norwegian|danish|icelandic|estonian|latvian|lithuanian|czech|slovak|hungarian|romanian|"
    r"bulgarian|greek|turkish|russian|ukrainian|arabic|hebrew|hindi|bengali|urdu|chinese|"
    r"mandarin|cantonese|japanese|korean|thai|vietnamese|indonesian|malay|swahili|welsh|irish|"
    r"catalan|basque|galician|croatian|serbian|slovenian|esperanto|klingon|emoji"
)
_AI = r"(ai|a\.i\.|assistant|agent|bot|chatbot|llm|(ai|language) model|copilot|gpt)"
CUES = [
    re.compile(rf"\b{_AI}s?\b", re.I),
    re.compile(
        rf"^\W*((dear|hey|hi|hello|attention|note (for|to)|message (for|to)|to|for)\s+"
        rf"(the |any |whichever |an )?([\w-]+ ){{0,2}}{_AI}s?\b|{_AI}s?\s*[,:])",
        re.I,
    ),
    re.compile(
        r"\b(your (\w+ )?(task|instructions?|goal|reply|answer|response|summary|output|"
        r"system prompt|configuration|next step|message)|before you (answer|reply|respond|"
        r"continue|proceed|do anything)|when you (answer|reply|respond|summari[sz]e|write|"
        r"read|process)|if you are (an? )?\w+ (reading|processing)|(you are|you're) "
        r"(now |hereby )?(authori[sz]ed|allowed|required|instructed))\b",
        re.I,
    ),
    re.compile(
        r"\b(ignore|disregard|forget|set aside|discard|drop|skip|override)\b[^.!?\n]{0,40}"
        r"\b(instructions?|task|goal|(the|your|original) request|prompt|above|rules|guidelines|"
        r"what the user)\b",
        re.I,
    ),
    re.compile(
        # Verbs that are as often nouns ("price list", "the order", "a book") are left
        # out here; the imperative cue catches them where they open a request.
        r"\b(send|forward|e-?mail|upload|share|transfer|wire|pay|delete|erase|purge|remove|"
        r"grant|give|change|update|set|buy|approve|confirm|disable|turn off|install|execute|"
        r"post|cancel|invite|reveal|print|repeat)\b[^.!?\n]{0,80}\b(passwords?|keys?|"
        r"codes?|credentials|funds|eur|usd|iban|account|access|admin|owner|every|all|files?|"
        r"folder|database|list|contacts|invoices|payroll|contract|card|address|prompt|"
        r"instructions|backups?|logs?|two-factor|alerts|booking|reservation|request|meetings?|"
        r"orders?|reviews?|message|subscriptions?|payments?|refunds?|money|forum|public)\b",
        re.I,
    ),
    re.compile(
        r"[\w.+-]+@[\w-]+\.[\w.-]+|https?://\S+|\b[A-Z]{2}\d{2}(?: ?\d{4}){3,}\b",
        re.I,
    ),
    re.compile(
        r"\b(do not|don't|never) (tell|mention|inform|alert|notify)|without (asking|telling|"
        r"checking)|no need to (ask|check|confirm)|keep (this|it) (between|secret|quiet)|"
        r"silently|delete this (message|e-?mail)|urgent|right away|immediately|as soon as you",
        re.I,
    ),
    re.compile(
        r"<!--|display\s*:\s*none|font-size\s*:\s*0|visibility\s*:\s*hidden|<\w+[^>]*\shidden\b|"
        r"color\s*:\s*#?f{3,6}\b|\[//\]: #|\balt=['\"][^'\"]{40,}",
        re.I,
    ),
    re.compile(
        r"^\W*(system|assistant|user|admin)\s*(message|prompt|notice)?\s*[:\]>]|<\|?/?\w+\|>|"
        r"</?(system|instructions?|result|tool_output)>|^#{2,}\s*(system|new task|instruction)|"
        r"\b(admin|system) override\b|end of (tool )?(result|output)",
        re.I,
    ),
    re.compile(
        rf"\b((write|answer|reply|respond|say)[^.!?\n]{{0,30}}\b(in|into) ({_LANGUAGES}|capital "
        r"letters|all caps|upper ?case)|translate (your|the|this) (\w+ )?(answer|reply|response|"
        r"summary|output)|(spell|write|say)\w*[^.!?\n]{0,30}backwards|reverse the (order|"
        r"words|text)|(as|in) an? (rhyming )?(poem|limerick|haiku|song)|rhyming|emojis? (after|"
        r"in|at the end of) every|add (the|this) link|include (the|this) "
        r"(image|link|phrase)|start (your reply |your answer )?with the words|end with a link|"
        r"recommend \w+[^.!?\n]{0,30}as the best)\b",
        re.I,
    ),
    re.compile(
        r"(^\W*(now |also |first,? |then )?|\b(please|kindly|could you|can you|would you|"
        r"if you could|i need you to|i want you to|make sure (you|to)|you (must|should|need to)|"
        r"be sure to|go ahead and)\s+(\w+\s+)?)(send|forward|e-?mail|upload|share|transfer|wire|"
        r"pay|delete|erase|purge|grant|give|change|update|buy|order|book|approve|confirm|accept|"
        r"disable|install|download|execute|post|cancel|invite|reveal|print|repeat|write|answer|"
        r"reply|translate|add|include|recommend|say|tell|move|publish|remove)\b",
        re.I,
    ),
]


def _split_text(text: str, out: list[str]) -> None:
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        pieces = _SENTENCE_END.split(line) if len(line) > MAX_SEGMENT // 2 else [line]
        for piece in pieces:
            while len(piece) > MAX_SEGMENT:
                cut = piece.rfind(" ", MAX_SEGMENT // 2, MAX_SEGMENT)
                cut = cut if cut > 0 else MAX_SEGMENT
                out.append(piece[:cut])
                piece = piece[cut:].lstrip()
            # Fewer than MIN_WORDS words ("ok", "billing", "needs review") cannot ask the agent
            # for anything: a record of such values is not scored at all, so it lands at the
            # floor rather than wherever the calibration puts a short, meaningless segment.
            if _LETTER.search(piece) and len(_WORD.findall(piece)) >= MIN_WORDS:
                out.append(piece)


def _json_strings(value: object, out: list[str]) -> None:
    if isinstance(value, str):
        _split_text(value, out)
    elif isinstance(value, Mapping):
        for item in value.values():
            _json_strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _json_strings(item, out)


def segments(text: str) -> list[str]:
    """The segments of one tool output: lines and sentences, or a JSON document's strings."""
    out: list[str] = []
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            value = json.loads(stripped)
        except ValueError:
            value = None
        if value is not None:
            _json_strings(value, out)
            return out
    _split_text(text, out)
    return out


# Pairs of cues that say more together than apart: an imperative that asks for an act on
# accounts, money or data, or names a destination; the agent addressed and asked for something.
_AI_NAMED, _ADDRESSED, _YOUR_ANSWER, _OVERRIDE, _ACT, _OUTSIDE, _HASTE = range(7)
_HIDDEN, _MARKER, _FORM, _IMPERATIVE = range(7, 11)
PAIRS = [
    (_IMPERATIVE, _ACT),
    (_IMPERATIVE, _OUTSIDE),
    (_IMPERATIVE, _HASTE),
    (_ACT, _OUTSIDE),
    (_ACT, _HASTE),
    (_AI_NAMED, _ACT),
    (_AI_NAMED, _IMPERATIVE),
    (_YOUR_ANSWER, _FORM),
    (_YOUR_ANSWER, _IMPERATIVE),
    (_ADDRESSED, _ACT),
    (_HIDDEN, _IMPERATIVE),
]


_AI_WORDS = frozenset(
    ["ai", "i", "assistant", "assistants", "agent", "agents", "bot", "bots", "chatbot", "llm"]
    + ["model", "models", "copilot", "gpt", "language"]
)
_VERBS = frozenset(
    [
        "send",
        "forward",
        "e",
        "email",
        "mail",
        "upload",
        "share",
        "transfer",
        "wire",
        "pay",
        "delete",
        "erase",
        "purge",
        "remove",
        "grant",
        "give",
        "change",
        "update",
        "set",
        "buy",
        "order",
        "book",
        "approve",
        "confirm",
        "disable",
        "turn",
        "install",
        "run",
        "execute",
        "post",
        "cancel",
        "invite",
        "reveal",
        "print",
        "repeat",
        "list",
        "download",
        "write",
        "answer",
        "reply",
        "translate",
        "add",
        "include",
        "recommend",
        "say",
        "tell",
        "accept",
        "move",
        "publish",
    ]
)
# Which cheap test lets a cue's regular expression run at all: words it needs (any of them) or
# substrings. Most segments hold none, and the regular expressions are the costly part.
_GATES: list[frozenset | tuple] = [
    _AI_WORDS,
    _AI_WORDS,
    frozenset(["your", "before", "when", "you", "if"]),
    frozenset(["ignore", "disregard", "forget", "set", "discard", "drop", "skip", "override"]),
    _VERBS,
    ("@", "http", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"),
    frozenset(
        [
            "do",
            "don",
            "never",
            "without",
            "no",
            "keep",
            "silently",
            "delete",
            "urgent",
            "right",
            "immediately",
            "as",
        ]
    ),
    ("<!--", "display", "font-size", "visibility", "hidden", "color", "[//]", "alt="),
    ("system", "assistant", "user", "admin", "<", "##", "override", "end of"),
    frozenset(
        [
            "write",
            "answer",
            "reply",
            "respond",
            "say",
            "translate",
            "backwards",
            "reverse",
            "rhyming",
            "limerick",
            "poem",
            "emoji",
            "add",
            "include",
            "start",
            "end",
            "recommend",
        ]
    ),
    _VERBS
    | frozenset(
        [
            "please",
            "kindly",
            "could",
            "can",
            "would",
            "need",
            "want",
            "make",
            "sure",
            "must",
            "should",
            "go",
        ]
    ),
]
_WORD = re.compile(r"\w+")
# (cue number, words gate or None, substrings gate, regular expression), read once per segment.
_GATED = [
    (j, gate if isinstance(gate, frozenset) else None, gate, cue)
    for j, (gate, cue) in enumerate(zip(_GATES, CUES, strict=True))
]


def read_segment(text: str, words_too: bool = True) -> tuple[set[str], list[float]]:
    """A segment's words and word pairs (lower case; none unless `words_too`), and its cues."""
    lower = text.lower()
    words = _WORD.findall(lower)
    present = set(words)
    cues = [0.0] * len(CUES)
    for j, words_gate, marks_gate, cue in _GATED:
        if words_gate is not None:
            if words_gate.isdisjoint(present):
                continue
        elif not any(mark in lower for mark in marks_gate):
            continue
        if cue.search(text):
            cues[j] = 1.0
    if not words_too:
        return set(), cues
    grams = present.union(map(" ".join, zip(words, words[1:], strict=False)))
    return grams, cues


# Cues that count only beside another: links, addresses, "urgent" and "immediately" are in
# every kind of ordinary document, and alone they said "request" of any README with a badge.
_ONLY_IN_PAIRS = (_OUTSIDE, _HASTE)


def cue_row(cues: list[float]) -> list[float]:
    """The cues, each pair of PAIRS, and how many cues (capped), all scaled by CUE_WEIGHT."""
    pairs = [cues[a] * cues[b] for a, b in PAIRS]
    alone = [0.0 if j in _ONLY_IN_PAIRS else v for j, v in enumerate(cues)]
    return [CUE_WEIGHT * v for v in (*alone, *pairs, min(sum(alone), 4.0) / 2)]


CUE_COLUMNS = len(CUES) + len(PAIRS) + 1


def pool(logits: np.ndarray, owners: np.ndarray, n: int) -> np.ndarray:
    """Per projection: [max segment logit, mean of the top two]; `owners`
    gives the projection (0..n-1) of each segment's logit."""
    out = np.full((n, POOLED), FLOOR, dtype=np.float64)
    counts = np.bincount(owners, minlength=n)
    for doc in np.flatnonzero(counts):
        mine = owners == doc
        top = np.sort(logits[mine])[::-1][:2]
        out[doc, 0] = top[0]
        out[doc, 1] = top.mean()
    return out


def segments_of(
    outputs: Callable[[Mapping], list[str]], projections: Sequence[Mapping]
) -> tuple[list[str], np.ndarray]:
    """Every segment of every output of `projections`, and the projection each came from."""
    texts: list[str] = []
    owners: list[int] = []
    for n, projection in enumerate(projections):
        start = len(texts)
        for output in outputs(projection):
            texts.extend(segments(output))
        owners.extend([n] * (len(texts) - start))
    return texts, np.array(owners, dtype=np.int64)


class SegmentScorer:
    """The fitted segment classifier: a weight per known word or word pair (presence,
    l2-normalised per segment; none when the model reads meaning only), one per cue column,
    one per dimension of the segment's pretrained embedding (embedding.py), and an intercept."""

    def __init__(
        self,
        outputs: Callable[[Mapping], list[str]],
        intercept: float,
        weights: Mapping[str, float],
        cue_weights: np.ndarray,
        embedding_weights: np.ndarray | None = None,
    ) -> None:
        self.outputs = outputs
        self.intercept = float(intercept)
        self.weights = dict(weights)
        self.cue_weights = np.asarray(cue_weights, dtype=np.float64)
        self.embedding_weights = (
            None if embedding_weights is None else np.asarray(embedding_weights, dtype=np.float64)
        )

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        """The segment classifier's logit of each segment."""
        weights = self.weights
        out = np.empty(len(texts), dtype=np.float64)
        rows = []
        for i, text in enumerate(texts):
            grams, cues = read_segment(text, bool(weights))
            # fsum: exact whatever the set's order, so every process gets the same float.
            word_score = math.fsum([weights.get(g, 0.0) for g in grams])
            out[i] = word_score / math.sqrt(len(grams)) if grams else 0.0
            rows.append(cue_row(cues))
        if rows:
            out += np.array(rows) @ self.cue_weights
            if self.embedding_weights is not None:
                out += embed(texts) @ self.embedding_weights
        return out + self.intercept

    def transform(self, projections: Sequence[Mapping]) -> np.ndarray:
        """The three pooled features of each projection."""
        projections = list(projections)
        texts, owners = segments_of(self.outputs, projections)
        return pool(self.logits(texts), owners, len(projections))

    def pooled(self, projection: Mapping) -> np.ndarray:
        """The three pooled features of one projection."""
        return self.transform([projection])[0]

    def segment_logits(self, text: str) -> list[tuple[float, str]]:
        """(logit, segment) of one output, highest first: why an output scored as it did."""
        texts = segments(text)
        return sorted(zip(map(float, self.logits(texts)), texts, strict=True), reverse=True)
