"""Fitting the local guardian: one small calibrated classifier per breaking condition.

Each condition has its own features, over only the part of the projection its question is
about (the extractors are guardian_core/adapters/local.py's EXTRACTORS): word and character
n-grams (TF-IDF) plus a few hand features where text alone cannot see the signal; integrity's
segment scores (training/segments.py). Each has one logistic regression fitted on all its
examples and one sigmoid calibration map fitted on that regression's out-of-fold scores (a fixed
3-fold split): binary for integrity, infeasible, goal_reached and stagnation, 4 classes for
risk, 5 for drift.

Fitting is deterministic: the examples are sorted, the seeds fixed and BLAS held to one thread,
so the same examples give the same floats in every process. `python -m training.build_local_model`
fits every condition on the corpus beside this file and writes the artefact the runtime loads;
a retrained version of the learning loop calls `train` at run time on the corpus plus its
labelled examples (guardian_core/adapters/local.py `retrained_model_for`).
"""

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import FeatureUnion, Pipeline, make_pipeline
from sklearn.preprocessing import FunctionTransformer
from threadpoolctl import threadpool_limits

from guardian_core.adapters.local import EXTRACTORS, ConditionModel, labels_of
from guardian_core.engine.conditions import Condition
from training.compile import compile_pipeline
from training.segments import SegmentScores
from training.sources import real_examples, sources_digest

TRAINING_DIR = Path(__file__).resolve().parent
RANDOM_STATE = 0
CALIBRATION_FOLDS = 3
HAND_WEIGHT = 2.0

# ---- the models ----------------------------------------------------------------------------
# Parts name their extractor (local.EXTRACTORS): the artefact records that name, and the
# runtime finds the same function by it.


def _texts(extract: str) -> FunctionTransformer:
    return FunctionTransformer(partial(_each, EXTRACTORS[extract]))


def _numbers(extract: str) -> FunctionTransformer:
    return FunctionTransformer(partial(_each_array, EXTRACTORS[extract]))


def _each(extract: Callable[[Mapping], str], projections: Sequence[Mapping]) -> list[str]:
    return [extract(p) for p in projections]


def _each_array(extract, projections: Sequence[Mapping]) -> np.ndarray:
    return np.array([extract(p) for p in projections], dtype=np.float64)


def _words_tfidf(extract: str, ngrams: tuple[int, int] = (1, 2)) -> Pipeline:
    vectorizer = TfidfVectorizer(ngram_range=ngrams, sublinear_tf=True, min_df=2)
    return make_pipeline(_texts(extract), vectorizer)


def _chars_tfidf(extract: str, ngrams: tuple[int, int] = (3, 5)) -> Pipeline:
    vectorizer = TfidfVectorizer(
        analyzer="char_wb", ngram_range=ngrams, sublinear_tf=True, min_df=2, max_features=20000
    )
    return make_pipeline(_texts(extract), vectorizer)


def _present(extract: str, analyzer: str, ngrams: tuple[int, int]) -> Pipeline:
    vectorizer = CountVectorizer(analyzer=analyzer, ngram_range=ngrams, binary=True, min_df=2)
    return make_pipeline(_texts(extract), vectorizer)


def _features(condition: Condition, folds: Sequence[int] | None = None) -> FeatureUnion:
    """What each classifier looks at: only the part of the projection its question is about."""
    match condition:
        case Condition.INTEGRITY:
            # A planted request is a sentence or two in an output of any length: every segment
            # is scored, and only the pooled scores reach the calibrated map.
            # Each segment is read for its meaning (its pretrained embedding) and for the cues
            # of text addressed to the agent; not for its exact words, which are the sources'.
            # Its out-of-fold scores come from folds across sources, not by source: measured
            # leave-one-source-out, by-source folds left the pooled scores of the calibration
            # so weak that every output landed in or above the band.
            segments = SegmentScores(EXTRACTORS["integrity_text"], words_too=False, meaning=True)
            parts = [("segments", segments)]
        case Condition.RISK:
            parts = [
                ("words", _words_tfidf("pending_text")),
                ("tool", _chars_tfidf("tool_name")),
                ("meaning", _numbers("pending_meaning")),
                ("hand", _numbers("risk_hand")),
            ]
        case Condition.INFEASIBLE:
            parts = [
                ("words", _words_tfidf("progress_text", (1, 3))),
                ("hand", _numbers("infeasible_hand")),
            ]
        case Condition.GOAL_REACHED:
            parts = [
                ("words", _words_tfidf("progress_text")),
                ("hand", _numbers("goal_reached_hand")),
            ]
        case Condition.DRIFT:
            parts = [
                ("words", _words_tfidf("recent_text", (1, 1))),
                ("hand", _numbers("drift_hand")),
            ]
        case Condition.STAGNATION:
            parts = [
                ("words", _words_tfidf("stagnation_text", (1, 1))),
                ("hand", _numbers("stagnation_hand")),
            ]
    # Hand features are few and general: a larger scale lets the fit lean on them rather than
    # on thousands of n-grams that only the training set's wording has.
    weights = {name: HAND_WEIGHT for name, _ in parts if name == "hand"}
    return FeatureUnion(parts, transformer_weights=weights)


# Regularisation per condition. Integrity has tens of thousands of presence features for a few
# hundred examples: a tighter fit keeps it from memorising the training set's wording.
_C = {
    Condition.INTEGRITY: 1.0,
    # Measured leave-one-source-out on real tools: C=1 lets fewer risky calls through and holds
    # fewer read-only ones than 10 or 100, at the same accuracy.
    Condition.RISK: 1.0,
    Condition.INFEASIBLE: 10.0,
    Condition.GOAL_REACHED: 10.0,
    Condition.DRIFT: 10.0,
    Condition.STAGNATION: 10.0,
}

# The share of injected outputs the bundled integrity model is calibrated at. Without it the
# share is whatever the sources happen to hold (25.6 % before spikee, proventra's tests and the
# HTML pages were added, 31.3 % after), and the calibration follows it: measured, that rise alone
# put 38 % of the READMEs test's ordinary documents above the band instead of 16 %. Examples are
# weighted so that the injected ones weigh this share of the whole; issue 25 takes the live prior.
TRAINING_PRIOR = {Condition.INTEGRITY: 0.25}


def prior_weights(condition: Condition, labels: np.ndarray) -> np.ndarray | None:
    """Per example, the weight that makes the positives weigh TRAINING_PRIOR[condition] of the
    whole (None for a condition trained at the prior its examples hold)."""
    prior = TRAINING_PRIOR.get(condition)
    if prior is None:
        return None
    positive = labels.astype(bool)
    share = positive.mean()
    return np.where(positive, prior / share, (1 - prior) / (1 - share))


def train(condition: Condition, examples: Sequence[Mapping]) -> ConditionModel:
    """Fit `condition`'s classifier on labelled traces; same examples, same model, any process."""
    ordered = sorted(examples, key=lambda e: json.dumps(e, sort_keys=True, ensure_ascii=False))
    projections = [e["projection"] for e in ordered]
    labels = np.array([_label(condition, e["label"]) for e in ordered], dtype=object)
    if condition == Condition.RISK:
        labels = labels.astype(str)
    elif condition == Condition.DRIFT:
        labels = labels.astype(np.int64)
    else:
        labels = labels.astype(bool)
    folds = None if condition == Condition.INTEGRITY else source_folds(ordered, labels)
    if folds is None:
        cv = StratifiedKFold(n_splits=CALIBRATION_FOLDS, shuffle=True, random_state=RANDOM_STATE)
    else:
        cv = [(np.flatnonzero(folds != k), np.flatnonzero(folds == k)) for k in np.unique(folds)]
    classifier = CalibratedClassifierCV(
        LogisticRegression(C=_C[condition], max_iter=5000, random_state=RANDOM_STATE),
        method="sigmoid",
        # The calibration map is fitted on scores of sources the classifier did not learn from,
        # so that it maps what a new source's text scores, not what memorised text scores.
        cv=cv,
        # One classifier fitted on everything and one map fitted on its out-of-fold scores,
        # rather than a model per fold averaged at every answer: a third of the work per answer.
        ensemble=False,
    )
    features = _features(condition, None if folds is None else folds.tolist())
    pipeline = Pipeline([("features", features), ("classifier", classifier)])
    # One BLAS thread: the same sums in the same order, so the same floats in every process.
    weights = prior_weights(condition, labels)
    fit_params = {} if weights is None else {"classifier__sample_weight": weights}
    with threadpool_limits(limits=1):
        pipeline.fit(projections, labels, **fit_params)
    return ConditionModel(condition, pipeline, compile_pipeline(pipeline))


def source_folds(examples: Sequence[Mapping], labels: np.ndarray) -> np.ndarray | None:
    """A fold per example such that no source is in two folds (a source is an example's first
    public source; every generated example is one source), or None when the sources cannot make
    CALIBRATION_FOLDS folds in which every fold's complement holds every class."""
    sources = [str((e.get("sources") or [e.get("source", "")])[0]) for e in examples]
    sizes: dict[str, int] = {}
    for source in sources:
        sizes[source] = sizes.get(source, 0) + 1
    if len(sizes) < CALIBRATION_FOLDS:
        return None
    # Largest sources first, each to the fold that is smallest so far: folds of similar size.
    fold_of: dict[str, int] = {}
    totals = [0] * CALIBRATION_FOLDS
    for source in sorted(sizes, key=lambda s: (-sizes[s], s)):
        k = totals.index(min(totals))
        fold_of[source] = k
        totals[k] += sizes[source]
    folds = np.array([fold_of[s] for s in sources], dtype=np.int64)
    classes = set(labels.tolist())
    if any(set(labels[folds != k].tolist()) != classes for k in range(CALIBRATION_FOLDS)):
        return None
    return folds


def _label(condition: Condition, label: object) -> object:
    allowed = labels_of(condition)
    if isinstance(label, bool) != (allowed == (False, True)) or label not in allowed:
        raise ValueError(f"{condition}: label {label!r} is not one of {allowed}")
    return label


# ---- the corpus ----------------------------------------------------------------------------


def load_examples(condition: Condition, directory: Path = TRAINING_DIR) -> list[dict]:
    """The labelled traces of `condition` from `<directory>/<condition>.jsonl`."""
    path = directory / f"{condition}.jsonl"
    examples = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        example = json.loads(line)
        if example.get("condition") != str(condition):
            raise ValueError(f"{path.name}:{number}: condition {example.get('condition')!r}")
        examples.append(example)
    return examples


# Conditions whose real material is trained on. The published runs (run-level conditions) are
# measured on, not trained on: whether those runs succeeded turns on whether an answer was right,
# which no structure shows, and fitted on them goal_reached learnt that a stated answer is no
# evidence (the demo's plain "Your order ships on Tuesday." fell from 0.99 to 0.24).
TRAINED_ON_REAL = (Condition.INTEGRITY, Condition.RISK)


def corpus_examples(condition: Condition, directory: Path = TRAINING_DIR) -> list[dict]:
    """What the bundled model of `condition` is fitted on: the generated corpus and, for
    integrity and risk, the real material of training/sources/ (training/sources.py)."""
    real = real_examples(condition, directory / "sources") if condition in TRAINED_ON_REAL else []
    return [*load_examples(condition, directory), *real]


def training_digest(directory: Path = TRAINING_DIR) -> str:
    """SHA-256 over the training files (name and bytes, in name order), then the sources'."""
    digest = hashlib.sha256()
    for path in sorted(directory.glob("*.jsonl")):
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    digest.update(sources_digest(directory / "sources").encode())
    return digest.hexdigest()
