"""The pretrained text representation the local guardian reads meaning with: WordLlama's bundled
256-dimension token embeddings (MIT), average-pooled per text and unit-normalised.

The weights and the tokenizer ship inside the `wordllama` package, so nothing is downloaded at
run time: WordLlama's plain `load()` would try to fetch a tokenizer file it already ships, so it
is loaded from the installed package's own folder with downloads disabled. The model is read
once per process (about a second, at the guardian's first use or a worker's warm-up) and then
embeds a 5 kB output's segments in about 1 ms: its tokenizer without padding, and the mean of
each segment's token rows, which is what WordLlama's own `embed` computes (a test holds them
equal) at half its cost.

Embeddings are rounded (DECIMALS) so that the same text gives the same numbers in every process
on every machine: the local guardian's model artefact is rebuilt and hash-checked in CI, and its
answers are replayed.
"""

import copy
import importlib.util
import itertools
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

EMBEDDING_NAME = "wordllama-0.4-l2_supercat-256"
DIMENSIONS = 256
DECIMALS = 5
MAX_CHUNKS = 200_000  # tokenized pieces kept per process (a few tens of MB at most)


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
        self._chunk_ids: dict[str, tuple[int, ...]] = {}
        self._chunk_lock = threading.Lock()

    def ids(self, texts: list[str]) -> list[list[int]]:
        """The tokenizer's ids of each text, a piece at a time (see `chunks`), each piece read
        once per process: most words of a tool output have been seen before."""
        keys_of = [chunks(text) for text in texts]
        known = self._chunk_ids
        found: dict[str, tuple[int, ...]] = {}
        missing = []
        for key in dict.fromkeys(itertools.chain.from_iterable(keys_of)):
            ids = known.get(key)  # one atomic read: another thread may clear the dict
            if ids is None:
                missing.append(key)
            else:
                found[key] = ids
        if missing:
            encoded = self.tokenizer.encode_batch_fast(missing, add_special_tokens=False)
            # Tuples: a full cache holds 200 000 of them, and the collector skips tuples of
            # ints, where lists would lengthen every full collection of the process.
            new = {key: tuple(e.ids) for key, e in zip(missing, encoded, strict=True)}
            found.update(new)
            with self._chunk_lock:
                if len(known) + len(new) > MAX_CHUNKS:
                    known.clear()  # a bound, not an eviction policy: the common words return
                known.update(new)
        return [[i for key in keys for i in found[key]] for keys in keys_of]

    def means(self, texts: list[str]) -> np.ndarray:
        ids_of = self.ids(texts)
        lengths = np.fromiter(map(len, ids_of), dtype=np.int64, count=len(texts))
        out = np.zeros((len(texts), DIMENSIONS), dtype=np.float64)
        if not lengths.any():
            return out
        ids = np.fromiter(itertools.chain.from_iterable(ids_of), dtype=np.int64)
        np.clip(ids, 0, len(self.table) - 1, out=ids)
        # Each text's sum of its token rows, a slice at a time: numpy's reduceat over the same
        # rows costs twice as much. Float32 sums, as WordLlama's own.
        rows = self.table[ids]
        sums = np.zeros((len(texts), DIMENSIONS), dtype=np.float64)
        start = 0
        for n, end in enumerate(np.cumsum(lengths).tolist()):
            if end > start:
                sums[n] = rows[start:end].sum(axis=0)
            start = end
        filled = lengths > 0
        out[filled] = sums[filled] / lengths[filled, None]
        return out


def chunks(text: str) -> list[str]:
    """`text` cut where a space follows another character, each piece as the tokenizer is to be
    asked for it: the ids of the pieces, end to end, are the ids of the text.

    WordLlama's tokenizer (Llama's BPE) writes every space as "▁", puts one in front of the
    text, and has no pre-tokenizer; no token of its vocabulary holds a "▁" after another
    character, so no merge crosses such a cut. A piece after the first is asked without one of
    its leading spaces, since the tokenizer puts that one back. tests/adapters/test_embedding.py
    holds the ids equal on the training material and on generated text."""
    parts = text.split(" ")
    first = 0
    while first < len(parts) - 1 and not parts[first]:
        first += 1
    out = [" " * first + parts[first]]
    pending = ""
    for word in parts[first + 1 :]:
        if word:
            out.append(pending + word)
            pending = ""
        else:
            pending += " "
    # Spaces at the end stay with the last piece: alone, one would be asked as "".
    out[-1] += " " * len(pending)
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
