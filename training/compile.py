"""A fitted scikit-learn pipeline of the local guardian read into the plain state the runtime
loads (guardian_core/adapters/local_inference.py `compiled_from_state`).

The pipelines training/fit.py fits are always the same shape: a FeatureUnion of text parts (an
extractor, then a Count- or TfidfVectorizer) and number parts (an extractor of hand features,
or integrity's SegmentScores), each with a weight; then one logistic regression with one sigmoid
map per class fitted on its out-of-fold scores (`CalibratedClassifierCV(ensemble=False)`).
`pipeline_state` reads that shape into lists, numbers and extractor names (what the model
artefact holds), or returns None for any other shape, which then answers through scikit-learn.
"""

from collections.abc import Callable

import numpy as np
from sklearn.calibration import CalibratedClassifierCV
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.preprocessing import FunctionTransformer

from guardian_core.adapters.embedding import EMBEDDING_NAME
from guardian_core.adapters.local import EXTRACTORS
from guardian_core.adapters.local_inference import (
    ANALYZERS,
    CompiledModel,
    compiled_from_state,
)
from training.segments import SegmentScores

# The vectorizer settings the runtime's analyzers reproduce; any other is not compiled.
_DEFAULTS = {
    "input": "content",
    "lowercase": True,
    "preprocessor": None,
    "tokenizer": None,
    "stop_words": None,
    "strip_accents": None,
    "token_pattern": r"(?u)\b\w\w+\b",
}


def compile_pipeline(pipeline: Pipeline) -> CompiledModel | None:
    """`pipeline` as the runtime's CompiledModel, or None when it is not the shape it reads."""
    state = pipeline_state(pipeline)
    return None if state is None else compiled_from_state(state, EXTRACTORS)


def pipeline_state(pipeline: Pipeline) -> dict | None:
    """The plain state of `pipeline`: what the model artefact holds for one condition."""
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
    # Number parts do not say how many features they give: one empty projection tells.
    widths = {
        name: len(texts[name].vocabulary_)
        if name in texts
        else int(np.asarray(transformer.transform([{}])).shape[1])
        for name, transformer in union.transformer_list
    }
    if sum(widths.values()) != coef.shape[1]:
        return None
    parts: list[dict] = []
    offset = 0
    for name, transformer in union.transformer_list:
        width = widths[name]
        block = coef[:, offset : offset + width].T * float(weights.get(name, 1.0))
        part = _part(transformer, texts.get(name), block.tolist())
        if part is None:
            return None
        parts.append({"name": name, **part})
        offset += width
    return {
        "parts": parts,
        "intercept": np.asarray(regression.intercept_, dtype=np.float64).tolist(),
        "a": [float(m.a_) for m in maps],
        "b": [float(m.b_) for m in maps],
        "classes": [_plain(c) for c in calibrated.classes_],
    }


def _plain(label: object) -> object:
    # numpy scalars back to the JSON types the labels came as (bool, int, str).
    return label.item() if isinstance(label, np.generic) else label


def _vectorizer(transformer) -> CountVectorizer | None:
    """The fitted vectorizer of an (extractor, vectorizer) text part, else None."""
    if not isinstance(transformer, Pipeline) or len(transformer.steps) != 2:
        return None
    vectorizer = transformer.steps[1][1]
    return vectorizer if isinstance(vectorizer, CountVectorizer) else None


def _part(transformer, vectorizer: CountVectorizer | None, block: list) -> dict | None:
    if vectorizer is None:
        if isinstance(transformer, SegmentScores):
            outputs = _name(transformer.outputs)
            if outputs is None:
                return None
            return {
                "kind": "segments",
                "outputs": outputs,
                "intercept": float(transformer.intercept_),
                "word_weights": dict(sorted(transformer.weights_.items())),
                "cue_weights": np.asarray(transformer.cue_weights_, dtype=np.float64).tolist(),
                "embedding": EMBEDDING_NAME if transformer.meaning else None,
                "embedding_weights": None
                if transformer.embedding_weights_ is None
                else np.asarray(transformer.embedding_weights_, dtype=np.float64).tolist(),
                "weights": block,
            }
        extract = _name(_extractor(transformer))
        if extract is None:
            return None
        return {"kind": "numbers", "extract": extract, "weights": block}
    function = transformer.steps[0][1]
    extract = _name(_extractor(function)) if isinstance(function, FunctionTransformer) else None
    settings = vectorizer.get_params()
    if extract is None or vectorizer.analyzer not in ANALYZERS:
        return None
    if any(settings[key] != value for key, value in _DEFAULTS.items()):
        return None
    if isinstance(vectorizer, TfidfVectorizer):
        if vectorizer.norm != "l2" or not vectorizer.use_idf or vectorizer.binary:
            return None
        idf = np.asarray(vectorizer.idf_, dtype=np.float64).tolist()
        sublinear = bool(vectorizer.sublinear_tf)
    elif vectorizer.binary:
        idf, sublinear = None, False
    else:
        return None  # raw counts: not a shape the local guardian fits
    terms = sorted(vectorizer.vocabulary_, key=vectorizer.vocabulary_.__getitem__)
    return {
        "kind": "text",
        "extract": extract,
        "analyzer": vectorizer.analyzer,
        "ngram_range": list(vectorizer.ngram_range),
        "terms": terms,
        "idf": idf,
        "sublinear": sublinear,
        "weights": block,
    }


def _extractor(function: FunctionTransformer) -> Callable | None:
    """The per-projection extractor inside training/fit.py's `partial(_each, extract)`."""
    func = function.func
    args = getattr(func, "args", ())
    return args[0] if len(args) == 1 and callable(args[0]) else None


def _name(extract: Callable | None) -> str | None:
    """The name the runtime knows `extract` by (local.EXTRACTORS), else None."""
    return next((name for name, f in EXTRACTORS.items() if f is extract), None)
