"""The local guardian's answer path: a fitted scikit-learn pipeline read once into plain arrays,
so that one answer costs the arithmetic of a linear model and not scikit-learn's checks.

scikit-learn spends about 1.5 ms validating inputs for every `predict_proba` of a single row, a
third of the local guardian's whole budget per condition. The pipelines it fits here are always
the same shape: a FeatureUnion of text parts (an extractor, then a Count- or TfidfVectorizer)
and number parts (an extractor of hand features), each with a weight; then one logistic
regression with one sigmoid map per class fitted on its out-of-fold scores
(`CalibratedClassifierCV(ensemble=False)`). `compile_pipeline` reads that shape into a
`CompiledModel` that computes the same probabilities (a test holds them equal to
scikit-learn's to 1e-9), or returns None for any other shape, which then goes through
scikit-learn as before.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.preprocessing import FunctionTransformer


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

    def score(self, projection: Mapping) -> np.ndarray:
        counts: dict[int, int] = {}
        vocabulary = self.vocabulary
        for term in self.analyzer(self.extract(projection)):
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


def compile_pipeline(pipeline: Pipeline) -> CompiledModel | None:
    """`pipeline` as a CompiledModel, or None when it is not the shape this module reads."""
    steps = dict(pipeline.steps)
    union, calibrated = steps.get("features"), steps.get("classifier")
    if not isinstance(union, FeatureUnion) or not isinstance(calibrated, CalibratedClassifierCV):
        return None
    if calibrated.ensemble is not False or len(calibrated.calibrated_classifiers_) != 1:
        return None
    fitted = calibrated.calibrated_classifiers_[0]
    regression = fitted.estimator
    maps = fitted.calibrators
    sigmoid = calibrated.method == "sigmoid" and all(hasattr(m, "a_") for m in maps)
    if not isinstance(regression, LogisticRegression) or not sigmoid:
        return None
    coef = np.asarray(regression.coef_, dtype=np.float64)  # (outputs, columns)
    weights = union.transformer_weights or {}
    texts = {
        name: _vectorizer(t)
        for name, t in union.transformer_list
        if not isinstance(t, FunctionTransformer)
    }
    if any(v is None for v in texts.values()):
        return None
    # Hand features do not say how many they are; with one such part, it is what is left.
    numbers = len(union.transformer_list) - len(texts)
    rest = coef.shape[1] - sum(len(v.vocabulary_) for v in texts.values())
    if numbers > 1 or rest < 0 or (numbers == 0 and rest != 0):
        return None
    parts: list[TextPart | NumberPart] = []
    offset = 0
    for name, transformer in union.transformer_list:
        width = len(texts[name].vocabulary_) if name in texts else rest
        block = np.ascontiguousarray(
            coef[:, offset : offset + width].T * float(weights.get(name, 1.0))
        )
        part = _part(transformer, texts.get(name), block)
        if part is None:
            return None
        parts.append(part)
        offset += width
    return CompiledModel(
        parts=tuple(parts),
        intercept=np.asarray(regression.intercept_, dtype=np.float64),
        a=np.array([m.a_ for m in maps], dtype=np.float64),
        b=np.array([m.b_ for m in maps], dtype=np.float64),
        classes=tuple(calibrated.classes_),
    )


def _vectorizer(transformer) -> CountVectorizer | None:
    """The fitted vectorizer of an (extractor, vectorizer) text part, else None."""
    if not isinstance(transformer, Pipeline) or len(transformer.steps) != 2:
        return None
    vectorizer = transformer.steps[1][1]
    return vectorizer if isinstance(vectorizer, CountVectorizer) else None


def _part(transformer, vectorizer: CountVectorizer | None, block: np.ndarray):
    if vectorizer is None:
        extract = _extractor(transformer)
        return None if extract is None else NumberPart(extract=extract, weights=block)
    function = transformer.steps[0][1]
    extract = _extractor(function) if isinstance(function, FunctionTransformer) else None
    if extract is None:
        return None
    if isinstance(vectorizer, TfidfVectorizer):
        if vectorizer.norm != "l2" or not vectorizer.use_idf or vectorizer.binary:
            return None
        idf, sublinear = np.asarray(vectorizer.idf_, dtype=np.float64), vectorizer.sublinear_tf
    elif vectorizer.binary:
        idf, sublinear = None, False
    else:
        return None  # raw counts: not a shape the local guardian fits
    return TextPart(
        extract=extract,
        analyzer=vectorizer.build_analyzer(),
        vocabulary=dict(vectorizer.vocabulary_),
        weights=block,
        idf=idf,
        sublinear=sublinear,
    )


def _extractor(function: FunctionTransformer):
    """The per-projection extractor inside the local guardian's `partial(_each, extract)`."""
    func = function.func
    args = getattr(func, "args", ())
    return args[0] if len(args) == 1 and callable(args[0]) else None
