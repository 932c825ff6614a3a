"""Fitting the local guardian's integrity segment classifier from whole-output labels.

The segment classifier learns from whole-output labels only (the labelled traces say whether an
output was injected, not where): multiple-instance learning. Every segment of a benign output is
benign, and so is the same text met in an injected one; in an injected output the segment the
previous round scores highest (with a neighbour that scores like a request) is the request and
the low scorers are carrier text; two relabelling rounds settle it. `fit_transform` returns scores
of each output from a model that did not see it (K folds), so the calibration downstream is fitted
on honest scores, not on the segment model's memory of its training set.

How a segment is read and scored once fitted is guardian_core/adapters/local_integrity.py.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np
from scipy import sparse
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import FunctionTransformer

from guardian_core.adapters.embedding import DIMENSIONS, embed
from guardian_core.adapters.local_integrity import (
    CUE_COLUMNS,
    POOLED,
    SegmentScorer,
    cue_row,
    pool,
    read_segment,
    segments_of,
)

FOLDS = 3
ROUNDS = 2
NEIGHBOURS = 1  # segments either side of a request's best one that may belong to it
TOL = 1e-4  # lbfgs: looser under-fits the words badly; tighter doubles training time
MEANING_TOL = 1e-3  # dense embedding columns converge well before that
BENIGN_SEGMENTS = 12


_EMBEDDED: dict[str, np.ndarray] = {}  # a fit reads the same segments in every fold and round


def _embedded(texts: list[str]) -> np.ndarray:
    missing = [t for t in dict.fromkeys(texts) if t not in _EMBEDDED]
    for start in range(0, len(missing), 4096):
        chunk = missing[start : start + 4096]
        _EMBEDDED.update(zip(chunk, embed(chunk), strict=True))
    if not texts:
        return np.zeros((0, DIMENSIONS))
    return np.array([_EMBEDDED[t] for t in texts])


def _training_matrix(
    texts: Sequence[str], words_too: bool = True, meaning: bool = False
) -> tuple[sparse.csr_matrix, dict[str, int]]:
    """Segments × (word and pair presence, l2-normalised per segment, if `words_too`; then the
    cue columns; then the segment's pretrained embedding, if `meaning`), and the vocabulary of
    the first part. A repeated segment is read once."""
    vocabulary: dict[str, int] = {}
    rows: dict[str, int] = {}
    indptr, indices, values, cue_rows = [0], [], [], []
    for text in texts:
        if text in rows:
            continue
        rows[text] = len(rows)
        grams, cues = read_segment(text)
        grams = grams if words_too else set()
        # Sorted: a set's order follows the per-process string hash, the vocabulary must not.
        columns = sorted(vocabulary.setdefault(g, len(vocabulary)) for g in sorted(grams))
        indices.extend(columns)
        values.extend([1.0 / math.sqrt(len(columns))] * len(columns) if columns else [])
        indptr.append(len(indices))
        cue_rows.append(cue_row(cues))
    words = sparse.csr_matrix(
        (np.array(values), np.array(indices, dtype=np.int64), np.array(indptr, dtype=np.int64)),
        shape=(len(rows), len(vocabulary)),
    )
    cues = sparse.csr_matrix(np.array(cue_rows).reshape(-1, CUE_COLUMNS))
    blocks = [words, cues]
    if meaning:
        blocks.append(sparse.csr_matrix(_embedded(list(rows))))
    if not words_too:
        # Dense columns only: plain arrays fit several times faster than a sparse matrix.
        dense = np.hstack([block.toarray() for block in blocks[1:]])
        return dense[np.array([rows[text] for text in texts], dtype=np.int64)], vocabulary
    unique = sparse.hstack(blocks, format="csr")
    index = np.array([rows[text] for text in texts], dtype=np.int64)
    return unique[index], vocabulary


def _rows(one: Callable[[Mapping], np.ndarray], projections: Sequence[Mapping]) -> np.ndarray:
    return np.array([one(p) for p in projections], dtype=np.float64).reshape(-1, POOLED)


def _sampled(owners: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Which segments the segment classifier is fitted on: every segment of an injected output,
    and at most BENIGN_SEGMENTS evenly spaced ones of each benign output. A long benign document
    is hundreds of ordinary lines that teach the fit nothing new and cost it most of its time."""
    counts = np.bincount(owners, minlength=len(labels))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    position = np.arange(len(owners)) - starts[owners]
    stride = np.maximum(1, -(-counts // BENIGN_SEGMENTS))
    return labels[owners] | (position % stride[owners] == 0)


class SegmentScores(FunctionTransformer):
    """Projections → [max segment logit, mean of the top two].

    A FunctionTransformer whose function is `partial(_rows, self.pooled)`, the shape of the
    local guardian's hand-feature parts. Fitting is its own (it learns from y); once fitted,
    `scorer_` (guardian_core/adapters/local_integrity.py) answers, and training/compile.py
    writes its weights into the model artefact."""

    def __init__(
        self,
        outputs: Callable[[Mapping], list[str]],
        c: float = 4.0,
        words_too: bool = True,
        meaning: bool = False,
        folds: Sequence[int] | None = None,
    ) -> None:
        self.outputs = outputs
        self.c = c
        self.words_too = words_too
        self.meaning = meaning
        # The fold of each training projection for the out-of-fold scores (in fit order): the
        # fit passes folds by source, so the calibration downstream sees scores of sources the
        # segment model did not learn from. None: every FOLDS-th output of each class.
        self.folds = folds
        super().__init__(func=partial(_rows, self.pooled))

    def get_params(self, deep: bool = True) -> dict:
        return {
            "outputs": self.outputs,
            "c": self.c,
            "words_too": self.words_too,
            "meaning": self.meaning,
            "folds": self.folds,
        }

    def _segments(self, projections: Sequence[Mapping]) -> tuple[list[str], np.ndarray]:
        return segments_of(self.outputs, projections)

    def _fit_segments(
        self,
        matrix,
        owners: np.ndarray,
        labels: np.ndarray,
        ids: np.ndarray,
        start: tuple[np.ndarray, float] | None = None,
    ) -> tuple[np.ndarray, float]:
        """Multiple-instance fit: (coef, intercept) of the segment classifier. `ids` number the
        distinct segment texts: a text that also occurs in a benign output is benign."""
        seen_benign = np.zeros(int(ids.max()) + 1 if len(ids) else 0, dtype=bool)
        seen_benign[ids[~labels[owners]]] = True
        positive_doc = labels[owners] & ~seen_benign[ids]
        counts = np.bincount(owners, minlength=len(labels)).astype(np.float64)
        y = positive_doc.copy()
        weight = np.where(positive_doc, 1.0 / np.maximum(counts[owners], 1.0), 1.0)
        # Later rounds start from the previous round's weights: they move little, so they
        # converge in a few steps.
        tol = TOL if self.words_too else MEANING_TOL
        model = LogisticRegression(C=self.c, max_iter=500, tol=tol, warm_start=True)
        if start is not None:  # the fit is convex: a start near the end only saves steps
            model.coef_, model.intercept_ = start[0][None, :].copy(), np.array([start[1]])
        for _ in range(ROUNDS + 1):
            model.fit(matrix, y, sample_weight=weight)
            scores = model.decision_function(matrix)
            benign = scores[~labels[owners]]
            sure, unsure = np.quantile(benign, [0.995, 0.95])
            best = np.full(len(labels), -np.inf)
            np.maximum.at(best, owners, np.where(positive_doc, scores, -np.inf))
            top = positive_doc & (scores >= best[owners])
            # A request is one to a few neighbouring segments: beside the best one, only a near
            # neighbour that scores like a request joins it; a high-scoring segment elsewhere in
            # the output is more likely an odd but benign sentence, and is left out.
            position = np.arange(len(owners))
            top_at = np.full(len(labels), -(10**9))
            np.maximum.at(top_at, owners[top], position[top])
            near = np.abs(position - top_at[owners]) <= NEIGHBOURS
            y = top | (positive_doc & near & (scores >= sure))
            weight = np.where(positive_doc & ~y & (scores >= unsure), 0.0, 1.0)
        return model.coef_.ravel().copy(), float(model.intercept_[0])

    def fit(self, projections: Sequence[Mapping], y) -> "SegmentScores":
        self.fit_transform(projections, y)
        return self

    def fit_transform(self, projections: Sequence[Mapping], y=None, **fit_params) -> np.ndarray:
        projections = list(projections)
        labels = np.asarray(y, dtype=bool)
        if labels.all() or not labels.any():
            raise ValueError("integrity needs injected and benign outputs to learn from")
        texts, owners = self._segments(projections)
        matrix, vocabulary = _training_matrix(texts, self.words_too, self.meaning)
        first: dict[str, int] = {}
        ids = np.array([first.setdefault(text, len(first)) for text in texts], dtype=np.int64)
        sample = _sampled(owners, labels)
        coef, icpt = self._fit_segments(matrix[sample], owners[sample], labels, ids[sample])
        self.intercept_ = icpt
        # What answering needs: a weight per known word or pair, and one per cue column.
        words = coef[: len(vocabulary)]
        self.weights_ = {g: float(words[i]) for g, i in vocabulary.items() if words[i]}
        after_cues = len(vocabulary) + CUE_COLUMNS
        self.cue_weights_ = coef[len(vocabulary) : after_cues].copy()
        self.embedding_weights_ = coef[after_cues:].copy() if self.meaning else None
        if self.meaning and len(self.embedding_weights_) != DIMENSIONS:
            raise ValueError("the segment matrix's embedding block is not DIMENSIONS wide")
        self.scorer_ = SegmentScorer(
            self.outputs, icpt, self.weights_, self.cue_weights_, self.embedding_weights_
        )
        if self.folds is not None:
            fold = np.asarray(self.folds, dtype=np.int64)
        else:
            # Fold k is every FOLDS-th output of each class, in input order (train() sorts its
            # examples, so the split is the same in every process).
            fold = np.empty(len(projections), dtype=np.int64)
            for label in (False, True):
                where = np.flatnonzero(labels == label)
                fold[where] = np.arange(len(where)) % FOLDS
        logits = np.empty(len(texts), dtype=np.float64)
        for k in np.unique(fold):
            inside = fold[owners] == k
            train_docs = fold != k
            keep = ~inside & sample
            remap = np.cumsum(train_docs) - 1
            if labels[train_docs].all() or not labels[train_docs].any():
                # The other folds hold one class only: nothing to learn apart from them.
                logits[inside] = matrix[inside] @ coef + icpt
                continue
            coef_k, intercept_k = self._fit_segments(
                matrix[keep], remap[owners[keep]], labels[train_docs], ids[keep], (coef, icpt)
            )
            logits[inside] = matrix[inside] @ coef_k + intercept_k
        return pool(logits, owners, len(projections))

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        """The segment classifier's logit of each segment."""
        return self.scorer_.logits(texts)

    def transform(self, projections: Sequence[Mapping]) -> np.ndarray:
        return self.scorer_.transform(projections)

    def pooled(self, projection: Mapping) -> np.ndarray:
        """The three pooled features of one projection."""
        return self.scorer_.pooled(projection)

    def segment_logits(self, text: str) -> list[tuple[float, str]]:
        """(logit, segment) of one output, highest first: why an output scored as it did."""
        return self.scorer_.segment_logits(text)
