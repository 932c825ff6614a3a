"""The local guardian's answer path: the fitted models read from the model artefact into plain
arrays, so that one answer costs the arithmetic of a linear model and needs no scikit-learn.

Every condition's model has the same shape: a union of text parts (an extractor, then word or
character n-grams counted for presence or weighted by TF-IDF) and number parts (an extractor of
hand features, or integrity's pooled segment scores), each with a weight; then one logistic
regression with one sigmoid map per class fitted on its out-of-fold scores. The artefact
(`guardian_core/adapters/local_model/`, written by `python -m training.build_local_model`)
holds, per condition, that shape as plain JSON: vocabularies, idf values, weights, intercepts,
the sigmoid maps and the classes; extractors are named, their code is local.py's. `read_artefact`
checks the artefact's SHA-256 against its manifest and refuses a mismatch; `compiled_from_state`
builds a `CompiledModel`, which computes the probabilities scikit-learn's fitted pipeline
computes (tests hold them equal).

The n-gram analyzers are scikit-learn's, rewritten: its default word tokens (`(?u)\\b\\w\\w+\\b`
after lower-casing) and `char_wb` n-grams; a test holds them equal to scikit-learn's.
"""

import gzip
import hashlib
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path

import numpy as np

from guardian_core.adapters.embedding import EMBEDDING_NAME
from guardian_core.adapters.local_integrity import SegmentScorer


class ModelArtefactError(RuntimeError):
    """The model artefact is missing, unreadable, or not the one its manifest names."""


# ---- scikit-learn's analyzers, as the vectorizers were fitted with them ---------------------

# CountVectorizer's default token_pattern, (?u)\b\w\w+\b, is every maximal run of two word
# characters or more; so is this, at half the cost (no boundary test at every position).
_TOKEN = re.compile(r"\w{2,}")
_WHITE_SPACES = re.compile(r"\s\s+")


# The conditions' texts are the same pieces (summaries, tool outputs) joined by PIECES in
# different selections; a separator of non-word characters splits no token, so each piece is
# read once per answer, however many texts it is part of.
PIECES = " \n "


@lru_cache(maxsize=256)
def _piece_tokens(piece: str) -> tuple[str, ...]:
    return tuple(_TOKEN.findall(piece.lower()))


def _word_tokens(text: str) -> tuple[str, ...]:
    pieces = text.split(PIECES)
    if len(pieces) == 1:
        return _piece_tokens(text)
    return tuple(itertools.chain.from_iterable(map(_piece_tokens, pieces)))


def word_ngrams(text: str, ngram_range: tuple[int, int]) -> list[str]:
    """CountVectorizer(analyzer="word", ngram_range=…)'s analyzer, with its defaults."""
    tokens = list(_word_tokens(text))
    min_n, max_n = ngram_range
    if max_n == 1:
        return tokens
    original = tokens
    if min_n == 1:
        tokens = list(original)
        min_n += 1
    else:
        tokens = []
    for n in range(min_n, min(max_n + 1, len(original) + 1)):
        for i in range(len(original) - n + 1):
            tokens.append(" ".join(original[i : i + n]))
    return tokens


def known_word_ngram_counts(
    text: str,
    ngram_range: tuple[int, int],
    vocabulary: Mapping[str, int],
    prefixes: frozenset[str],
) -> dict[int, int]:
    """{column: count} of the known terms among word_ngrams(text, ngram_range), in the order of
    their first occurrence in that list (so the sums over them are the same floats): unigrams
    left to right, then bigrams, then trigrams."""
    tokens = _word_tokens(text)
    min_n, max_n = ngram_range
    counts: dict[int, int] = {}
    get = vocabulary.get
    # (start, n-gram so far) of every n-gram that some known term begins with.
    starts = range(len(tokens))
    grams: Sequence[str] = tokens
    for n in range(1, max_n + 1):
        if n > 1:
            last = len(tokens) - n + 1
            kept = [(i, gram) for i, gram in zip(starts, grams, strict=True) if gram in prefixes]
            starts = [i for i, _ in kept if i < last]
            grams = [f"{gram} {tokens[i + n - 1]}" for i, gram in kept if i < last]
        if n >= min_n:
            # Counter keeps first occurrences in order, as the list of every n-gram has them.
            for gram, count in Counter(grams).items():
                column = get(gram)
                if column is not None:
                    counts[column] = counts.get(column, 0) + count
    return counts


def word_prefixes(terms: Sequence[str]) -> frozenset[str]:
    """Every proper word prefix of the word n-grams `terms` ("a b c" gives "a" and "a b")."""
    out = set()
    for term in terms:
        words = term.split(" ")
        out.update(" ".join(words[:k]) for k in range(1, len(words)))
    return frozenset(out)


def char_wb_ngrams(text: str, ngram_range: tuple[int, int]) -> list[str]:
    """CountVectorizer(analyzer="char_wb", ngram_range=…)'s analyzer, with its defaults: the
    n-grams inside each word, padded with a space either side."""
    text = _WHITE_SPACES.sub(" ", text.lower())
    min_n, max_n = ngram_range
    ngrams: list[str] = []
    for w in text.split():
        w = f" {w} "
        for n in range(min_n, max_n + 1):
            offset = 0
            ngrams.append(w[offset : offset + n])
            while offset + n < len(w):
                offset += 1
                ngrams.append(w[offset : offset + n])
            if offset == 0:  # a short word (shorter than n) counts once
                break
    return ngrams


ANALYZERS: dict[str, Callable[[str, tuple[int, int]], list[str]]] = {
    "word": word_ngrams,
    "char_wb": char_wb_ngrams,
}


# ---- the compiled model ----------------------------------------------------------------------


@dataclass(frozen=True)
class TextPart:
    """A vectorised text: its terms' columns and, per column, the weights of every output."""

    extract: Callable[[Mapping], str]
    analyzer: Callable[[str], list[str]]
    vocabulary: Mapping[str, int]
    # Per column of this part, the coefficient of each output times the part's weight.
    weights: np.ndarray  # (columns, outputs)
    # None: presence (a binary CountVectorizer). Else TF-IDF with these idf values.
    idf: np.ndarray | None
    sublinear: bool
    # Word n-grams only: the n-gram range, and every proper prefix of a known n-gram, so that an
    # n-gram nothing known begins with is never built (most of a long output's are not).
    word_range: tuple[int, int] | None = None
    prefixes: frozenset[str] = frozenset()

    def score(self, projection: Mapping) -> np.ndarray:
        text = self.extract(projection)
        if self.word_range is not None:
            counts = known_word_ngram_counts(text, self.word_range, self.vocabulary, self.prefixes)
        else:
            counts = {}
            vocabulary = self.vocabulary
            for term in self.analyzer(text):
                column = vocabulary.get(term)
                if column is not None:
                    counts[column] = counts.get(column, 0) + 1
        if not counts:
            return np.zeros(self.weights.shape[1])
        columns = np.fromiter(counts, dtype=np.int64, count=len(counts))
        if self.idf is None:
            return self.weights[columns].sum(axis=0)
        tf = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        if self.sublinear:
            tf = np.log(tf) + 1.0
        values = tf * self.idf[columns]
        norm = math.sqrt(float(values @ values))
        return (values / norm) @ self.weights[columns] if norm else np.zeros(self.weights.shape[1])


@dataclass(frozen=True)
class NumberPart:
    """Hand features: an extractor of numbers and their weights."""

    extract: Callable[[Mapping], list[float]]
    weights: np.ndarray  # (features, outputs)

    def score(self, projection: Mapping) -> np.ndarray:
        return np.asarray(self.extract(projection), dtype=np.float64) @ self.weights


@dataclass(frozen=True)
class CompiledModel:
    """A logistic regression over the parts, then one sigmoid map per output."""

    parts: tuple[TextPart | NumberPart, ...]
    intercept: np.ndarray  # (outputs,)
    # Sigmoid maps p = 1 / (1 + exp(a * score + b)), one per output.
    a: np.ndarray
    b: np.ndarray
    classes: tuple  # the classes in the order of predict_proba's columns

    def predict_proba(self, projections: Sequence[Mapping]) -> np.ndarray:
        return np.array([self._one(p) for p in projections]).reshape(-1, len(self.classes))

    def _one(self, projection: Mapping) -> np.ndarray:
        score = self.intercept.copy()
        for part in self.parts:
            score += part.score(projection)
        mapped = 1.0 / (1.0 + np.exp(self.a * score + self.b))
        if len(self.classes) == 2:
            return np.array([1.0 - mapped[0], mapped[0]])
        total = mapped.sum()
        proba = mapped / total if total else np.full(len(self.classes), 1 / len(self.classes))
        # As scikit-learn does: a sum that lands a hair above 1 is 1.
        proba[(proba > 1.0) & (proba <= 1.0 + 1e-5)] = 1.0
        return proba


def _matrix(rows: Sequence[Sequence[float]], outputs: int) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(rows, dtype=np.float64).reshape(-1, outputs))


def compiled_from_state(state: Mapping, extractors: Mapping[str, Callable]) -> CompiledModel:
    """A condition's model from its plain state (one entry of the artefact's "conditions", or
    what training/compile.py reads from a freshly fitted pipeline); `extractors` by name."""
    intercept = np.asarray(state["intercept"], dtype=np.float64)
    outputs = len(intercept)
    parts: list[TextPart | NumberPart] = []
    for part in state["parts"]:
        weights = _matrix(part["weights"], outputs)
        if part["kind"] == "text":
            idf = part["idf"]
            words = part["analyzer"] == "word"
            parts.append(
                TextPart(
                    extract=extractors[part["extract"]],
                    analyzer=partial(ANALYZERS[part["analyzer"]], ngram_range=part["ngram_range"]),
                    vocabulary={term: n for n, term in enumerate(part["terms"])},
                    weights=weights,
                    idf=None if idf is None else np.asarray(idf, dtype=np.float64),
                    sublinear=bool(part["sublinear"]),
                    word_range=tuple(part["ngram_range"]) if words else None,
                    prefixes=word_prefixes(part["terms"]) if words else frozenset(),
                )
            )
        elif part["kind"] == "numbers":
            parts.append(NumberPart(extract=extractors[part["extract"]], weights=weights))
        elif part["kind"] == "segments":
            if part.get("embedding") not in (None, EMBEDDING_NAME):
                raise ModelArtefactError(
                    f"the model reads embeddings {part['embedding']!r}, this runtime has "
                    f"{EMBEDDING_NAME!r}"
                )
            embedding_weights = part.get("embedding_weights")
            scorer = SegmentScorer(
                extractors[part["outputs"]],
                part["intercept"],
                part["word_weights"],
                np.asarray(part["cue_weights"], dtype=np.float64),
                None
                if embedding_weights is None
                else np.asarray(embedding_weights, dtype=np.float64),
            )
            parts.append(NumberPart(extract=scorer.pooled, weights=weights))
        else:
            raise ModelArtefactError(f"unknown model part kind {part['kind']!r}")
    return CompiledModel(
        parts=tuple(parts),
        intercept=intercept,
        a=np.asarray(state["a"], dtype=np.float64),
        b=np.asarray(state["b"], dtype=np.float64),
        classes=tuple(state["classes"]),
    )


# ---- the artefact on disk ----------------------------------------------------------------------


def read_artefact(artefact: Path, manifest: Path) -> tuple[dict, dict]:
    """(manifest, model): the artefact's JSON once its SHA-256 (of the JSON, uncompressed) is
    the one its manifest records. Raises ModelArtefactError otherwise."""
    try:
        meta = json.loads(manifest.read_text(encoding="utf-8"))
        payload = gzip.decompress(artefact.read_bytes())
    except (OSError, ValueError, EOFError) as exc:  # missing, truncated, not gzip, not JSON
        raise ModelArtefactError(f"cannot read the local guardian's model: {exc}") from exc
    digest = hashlib.sha256(payload).hexdigest()
    if not isinstance(meta, dict) or digest != meta.get("sha256"):
        expected = meta.get("sha256") if isinstance(meta, dict) else None
        raise ModelArtefactError(
            f"{artefact.name}: SHA-256 {digest} is not the manifest's {expected!r}; "
            "rebuild it with `make guardian-model`"
        )
    try:
        model = json.loads(payload)
    except ValueError as exc:
        raise ModelArtefactError(f"{artefact.name}: not JSON: {exc}") from exc
    return meta, model
