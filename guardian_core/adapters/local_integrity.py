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


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# What each cue's regular expression cannot match without: words of the segment (lower case,
# whole) or substrings of it. Most segments hold none, and the regular expressions are the costly
# part. Each gate is a necessary condition, never a heuristic: a gate that hides a match would
# change the answers, and tests/adapters/test_local_integrity_gates.py holds every gate to its
# cue on the whole training corpus and on generated text.
_AI_WORDS = _words(
    "ai ais assistant assistants agent agents bot bots chatbot chatbots llm llms copilot "
    "copilots gpt gpts"
)
_ANSWER_NOUNS = _words(
    "task instruction instructions goal reply answer response summary output prompt "
    "configuration step message"
)
_ACT_VERBS = _words(
    "send forward e email upload share transfer wire pay delete erase purge remove grant give "
    "change update set buy approve confirm disable turn install execute post cancel invite "
    "reveal print repeat"
)
_ACT_OBJECTS = _words(
    "password passwords key keys code codes credentials funds eur usd iban account access admin "
    "owner every all file files folder database list contacts invoices payroll contract card "
    "address prompt instructions backup backups log logs two alerts booking reservation request "
    "meeting meetings order orders review reviews message subscription subscriptions payment "
    "payments refund refunds money forum public"
)
_REQUEST_VERBS = _words(
    "send forward e email upload share transfer wire pay delete erase purge grant give change "
    "update buy order book approve confirm accept disable install download execute post cancel "
    "invite reveal print repeat write answer reply translate add include recommend say tell "
    "move publish remove"
)
_FORM_WORDS = _words("translate reverse poem limerick haiku song rhyming emoji emojis") | frozenset(
    w.split()[-1] for w in _LANGUAGES.split("|")
)
_CASE_WORDS = _words("capital caps upper uppercase")
_IBAN_HINT = re.compile(r"\d{4} ?\d{4}")


def _any(words: frozenset[str], present: frozenset[str] | set[str]) -> bool:
    return not words.isdisjoint(present)


def _has(lower: str, *marks: str) -> bool:
    return any(mark in lower for mark in marks)


def _gate_ai(w: set[str], lower: str) -> bool:
    return (
        _any(_AI_WORDS, w)
        or "a.i." in lower
        or ("language" in w and ("model" in w or "models" in w))
    )


def _gate_addressed(w: set[str], lower: str) -> bool:
    return _gate_ai(w, lower)


def _gate_your_answer(w: set[str], lower: str) -> bool:
    return (
        ("your" in w and _any(_ANSWER_NOUNS, w))
        or ("you" in w and ("before" in w or "when" in w or "if" in w))
        or ("you" in w and ("are" in w or "re" in w))
    )


def _gate_override(w: set[str], lower: str) -> bool:
    return _has(lower, "ignore", "disregard", "forget", "set aside", "discard", "drop", "skip") or (
        "override" in lower
    )


def _gate_act(w: set[str], lower: str) -> bool:
    return _any(_ACT_VERBS, w) and _any(_ACT_OBJECTS, w)


def _gate_outside(w: set[str], lower: str) -> bool:
    return "@" in lower or "http" in lower or _IBAN_HINT.search(lower) is not None


def _gate_haste(w: set[str], lower: str) -> bool:
    return _has(
        lower,
        "tell",
        "mention",
        "inform",
        "alert",
        "notify",
        "asking",
        "checking",
        "need to",
        "between",
        "secret",
        "quiet",
        "silently",
        "delete this",
        "urgent",
        "right away",
        "immediately",
        "as soon as you",
    )


def _gate_hidden(w: set[str], lower: str) -> bool:
    marks = ("<!--", "display", "font-size", "visibility", "hidden", "color", "[//]", "alt=")
    return _has(lower, *marks)


def _gate_marker(w: set[str], lower: str) -> bool:
    return _has(lower, "system", "assistant", "user", "admin", "<", "##", "override", "end of")


def _gate_form(w: set[str], lower: str) -> bool:
    return (
        _any(_FORM_WORDS, w)
        or "backwards" in lower
        or ("link" in w and ("add" in w or "include" in w or "end" in w))
        or ("include" in w and ("image" in w or "phrase" in w))
        or ("start" in w and "words" in w)
        or ("recommend" in w and "best" in w)
        or (("in" in w or "into" in w) and _any(_CASE_WORDS, w))
    )


_OPENERS = _words("now also first then")
_POLITE = _words("please kindly could can would need want sure must should go")


def _gate_request(w: set[str], lower: str, words: list[str] | None = None) -> bool:
    # The verb opens the segment (maybe after "now", "then"...) or follows a polite opener;
    # `words` in order is None when the gate is asked of a whole output at once.
    if not _any(_REQUEST_VERBS, w):
        return False
    if words is None or _any(_POLITE, w):
        return True
    first = words[1] if len(words) > 1 and words[0] in _OPENERS else words[0] if words else ""
    return first in _REQUEST_VERBS


_GATES = [
    _gate_ai,
    _gate_addressed,
    _gate_your_answer,
    _gate_override,
    _gate_act,
    _gate_outside,
    _gate_haste,
    _gate_hidden,
    _gate_marker,
    _gate_form,
    _gate_request,
]
_WORD = re.compile(r"\w+")

# Four cues hold only where one of their words is in the segment, besides their regular
# expression: that is how the model artefact was fitted. So "LLMs" alone is not an AI named,
# "answers in capital letters" not a demand on the form, "Urgently," alone not haste. Reading
# those too is a change to measure with a retrain: tried, it cost 0.015 of AUROC
# leave-one-source-out (0.743 -> 0.728) and 0.02 on the READMEs test.
_NAMED = _words("ai i assistant assistants agent agents bot bots chatbot llm model models")
_NAMED |= _words("copilot gpt language")
WORDS_NEEDED: dict[int, frozenset[str]] = {
    0: _NAMED,
    1: _NAMED,
    6: _words("do don never without no keep silently delete urgent right immediately as"),
    9: _words(
        "write answer reply respond say translate backwards reverse rhyming limerick poem "
        "emoji add include start end recommend"
    ),
}
_GATED = [
    (j, (WORDS_NEEDED.get(j), gate, cue))
    for j, (gate, cue) in enumerate(zip(_GATES, CUES, strict=True))
]


def read_segment(text: str, words_too: bool = True) -> tuple[set[str], list[float]]:
    """A segment's words and word pairs (lower case; none unless `words_too`), and its cues."""
    cues = read_cues([text])[0].tolist()
    return (_grams(text) if words_too else set()), cues


def _grams(text: str) -> set[str]:
    words = _WORD.findall(text.lower())
    return set(words).union(map(" ".join, zip(words, words[1:], strict=False)))


def read_cues(texts: Sequence[str]) -> np.ndarray:
    """The cues of each segment of one output (0 or 1, a row per segment). A gate is asked first
    of all the segments together: a cue none of them can hold is not looked for in any."""
    out = np.zeros((len(texts), len(CUES)), dtype=np.float64)
    if not texts:
        return out
    lowers = [text.lower() for text in texts]
    whole = "\n".join(lowers)
    per_segment = [(words, set(words)) for words in map(_WORD.findall, lowers)]
    whole_words = set().union(*(present for _, present in per_segment))
    for j, (needed, gate, cue) in _GATED:
        if needed is not None and needed.isdisjoint(whole_words) or not gate(whole_words, whole):
            continue
        for i, (text, lower, (words, present)) in enumerate(
            zip(texts, lowers, per_segment, strict=True)
        ):
            if needed is not None and needed.isdisjoint(present):
                passes = False
            elif gate is _gate_request:
                passes = _gate_request(present, lower, words)
            else:
                passes = gate(present, lower)
            if passes and cue.search(text):
                out[i, j] = 1.0
    return out


# Cues that count only beside another: links, addresses, "urgent" and "immediately" are in
# every kind of ordinary document, and alone they said "request" of any README with a badge.
_ONLY_IN_PAIRS = (_OUTSIDE, _HASTE)


def cue_row(cues: list[float]) -> list[float]:
    """The cues, each pair of PAIRS, and how many cues (capped), all scaled by CUE_WEIGHT."""
    return cue_rows(np.array([cues], dtype=np.float64))[0].tolist()


_PAIR_A = np.array([a for a, _ in PAIRS])
_PAIR_B = np.array([b for _, b in PAIRS])


def cue_rows(cues: np.ndarray) -> np.ndarray:
    """cue_row of each row of a (segments, cues) matrix."""
    alone = cues.copy()
    alone[:, list(_ONLY_IN_PAIRS)] = 0.0
    pairs = cues[:, _PAIR_A] * cues[:, _PAIR_B]
    count = np.minimum(alone.sum(axis=1, keepdims=True), 4.0) / 2
    return CUE_WEIGHT * np.hstack([alone, pairs, count])


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
        texts = list(texts)
        out = np.zeros(len(texts), dtype=np.float64)
        if not texts:
            return out
        if self.weights:
            for i, text in enumerate(texts):
                grams = _grams(text)
                # fsum: exact whatever the set's order, so every process gets the same float.
                word_score = math.fsum([self.weights.get(g, 0.0) for g in grams])
                out[i] = word_score / math.sqrt(len(grams)) if grams else 0.0
        out += cue_rows(read_cues(texts)) @ self.cue_weights
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
