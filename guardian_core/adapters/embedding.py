"""The pretrained text representation the local guardian reads meaning with: WordLlama's bundled
256-dimension token embeddings (MIT), average-pooled per text and unit-normalised.

The weights and the tokenizer ship inside the `wordllama` package, so nothing is downloaded at
run time: WordLlama's plain `load()` would try to fetch a tokenizer file it already ships, so it
is loaded from the installed package's own folder with downloads disabled. The model is read
once per process (about a second, at the guardian's first use or a worker's warm-up) and then
embeds a 5 kB output's segments in about 2 ms.

Embeddings are rounded (DECIMALS) so that the same text gives the same numbers in every process
on every machine: the local guardian's model artefact is rebuilt and hash-checked in CI, and its
answers are replayed.
"""

import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

EMBEDDING_NAME = "wordllama-0.4-l2_supercat-256"
DIMENSIONS = 256
DECIMALS = 5


class EmbeddingUnavailable(RuntimeError):
    """The pretrained embeddings cannot be loaded (package missing or its files altered)."""


_MODEL = None
_LOADING = threading.Lock()


def _load():
    spec = importlib.util.find_spec("wordllama")
    if spec is None or spec.origin is None:
        raise EmbeddingUnavailable("the wordllama package is not installed")
    folder = Path(spec.origin).resolve().parent
    # wordllama calls logging.basicConfig at import; keep the process's logging as it was.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from wordllama import WordLlama

        return WordLlama.load(
            config="l2_supercat", dim=DIMENSIONS, cache_dir=folder, disable_download=True
        )
    except Exception as exc:  # any failure to read its files: the guardian fails closed
        raise EmbeddingUnavailable(f"cannot load the wordllama embeddings: {exc}") from exc
    finally:
        root.handlers[:], root.level = handlers, level


def model():
    """The loaded WordLlama inference object, read at the first use in this process."""
    global _MODEL
    if _MODEL is None:
        with _LOADING:
            if _MODEL is None:
                _MODEL = _load()
    return _MODEL


def embed(texts: Sequence[str]) -> np.ndarray:
    """One unit-length row per text (zeros for a text with no tokens), float64, rounded."""
    texts = list(texts)
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float64)
    # A text with no tokens pools to 0/0; it carries no meaning, so its row is zeros.
    with np.errstate(invalid="ignore", divide="ignore"):
        rows = np.nan_to_num(model().embed(texts, norm=False).astype(np.float64))
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return np.round(rows, DECIMALS)


def embed_one(text: str) -> np.ndarray:
    """The embedding of one text."""
    return embed([text])[0]
