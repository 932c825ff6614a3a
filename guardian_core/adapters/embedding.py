"""The pretrained text representation the local guardian reads meaning with: WordLlama's bundled
256-dimension token embeddings (MIT), average-pooled per text and unit-normalised.

The weights and the tokenizer ship inside the `wordllama` package, so nothing is downloaded at
run time: WordLlama's plain `load()` would try to fetch a tokenizer file it already ships, so it
is loaded from the installed package's own folder with downloads disabled. The model is read
once per process (about a second, at the guardian's first use or a worker's warm-up) and then
embeds a 5 kB output's segments in about 2 ms: its tokenizer without padding, and the mean of
each segment's token rows, which is what WordLlama's own `embed` computes (a test holds them
equal) at half its cost.

Embeddings are rounded (DECIMALS) so that the same text gives the same numbers in every process
on every machine: the local guardian's model artefact is rebuilt and hash-checked in CI, and its
answers are replayed.
"""

import copy
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


class _Pooled:
    """WordLlama's token embeddings and tokenizer, average-pooled as its `embed` pools them,
    without padding: a batch padded to its longest segment costs twice the time."""

    def __init__(self, inference) -> None:
        self.table = inference.embedding  # (vocabulary, DIMENSIONS) float32
        self.tokenizer = copy.deepcopy(inference.tokenizer)
        self.tokenizer.no_padding()

    def means(self, texts: list[str]) -> np.ndarray:
        encoded = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encoded), dtype=np.int64, count=len(texts))
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float64)
        if not lengths.any():
            return out
        ids = np.fromiter((i for e in encoded for i in e.ids), dtype=np.int64)
        np.clip(ids, 0, len(self.table) - 1, out=ids)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        filled = lengths > 0
        sums = np.add.reduceat(self.table[ids], starts[filled], axis=0)
        out[filled] = sums / lengths[filled, None]
        return out


def _load() -> _Pooled:
    spec = importlib.util.find_spec("wordllama")
    if spec is None or spec.origin is None:
        raise EmbeddingUnavailable("the wordllama package is not installed")
    folder = Path(spec.origin).resolve().parent
    # wordllama calls logging.basicConfig at import; keep the process's logging as it was.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from wordllama import WordLlama

        inference = WordLlama.load(
            config="l2_supercat", dim=DIMENSIONS, cache_dir=folder, disable_download=True
        )
        return _Pooled(inference)
    except Exception as exc:  # any failure to read its files: the guardian fails closed
        raise EmbeddingUnavailable(f"cannot load the wordllama embeddings: {exc}") from exc
    finally:
        root.handlers[:], root.level = handlers, level


def model() -> _Pooled:
    """The loaded embeddings, read at the first use in this process."""
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
    rows = model().means(texts)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return np.round(rows, DECIMALS)


def embed_one(text: str) -> np.ndarray:
    """The embedding of one text."""
    return embed([text])[0]
