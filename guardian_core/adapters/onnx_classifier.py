"""Bring your own model: a guardian whose chosen conditions are answered by local text
classifiers exported to ONNX (Prompt Guard, a DeBERTa fine-tune, a team's own model), the
others by another guardian (in a run, the local one).

A model directory holds `model.onnx`, its Hugging Face `tokenizer.json` and `guardian.json`,
which names the model's output labels and, per condition it can answer, which labels make the
answer (docs/adapters.md, "Bring your own model"). A directory is read at its first use in a
process and kept while its files stay as they are; a missing, unreadable or invalid one raises
OnnxModelError naming the file and the field, which the guardian turns into Malformed answers
for the conditions it serves (uncertain: the turn escalates), never into a default probability.

Length cannot push a score: each text is cut into windows of the model's `max_length` tokens
(overlapping by `stride`), every window is scored (in batches) and the answer is the window
whose firing side is highest: P(yes) for a yes/no condition, P(irreversible or regulated) for
risk, P(drift score ≤ 1) for drift. Probabilities go out raw; a recalibrated guardian model
version of the `onnx` adapter maps them (adapters/calibrated.py), as for any other guardian.

onnxruntime and tokenizers are imported at the first load, not with this module: a process that
never asks such a model does not pay for them.
"""

import contextlib
import hashlib
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from guardian_core.adapters.onnx_config import (
    CONFIG_FILE,
    FILES,
    MODEL_FILE,
    TOKENIZER_FILE,
    Head,
    OnnxModelError,
    read_config,
)
from guardian_core.adapters.pricing import NOTHING, Spend
from guardian_core.adapters.timing import ask_concurrently
from guardian_core.engine.canonical import canonical_json
from guardian_core.engine.conditions import YES_NO_CONDITIONS, Condition, Malformed

INSTALL_HINT = "install them with: pip install onnxruntime tokenizers"

# Windows per session run: a 5 kB output is 3-4 windows of 512 tokens, so one run; a batch
# this size keeps a long projection's padding and memory bounded.
BATCH_WINDOWS = 16
DEFAULT_DEADLINE_SECONDS = 2.0
DECIMALS = 6  # as the local guardian: far finer than any threshold, and replays compare equal
NO_PENDING_CALL = "no pending proposal to assess"
# The inputs Guardian can feed a model, from the tokenizer's encoding.
FEEDS = ("input_ids", "attention_mask", "token_type_ids")


# ---- an answer from the windows' scores -----------------------------------------------------


def head_answer(head: Head, rows: np.ndarray) -> object:
    """The raw answer from the label probabilities of every window the condition read
    (rows × labels): the window whose firing side is highest, so neither length nor
    benign text around an instruction can lower it."""
    columns = np.stack([rows[:, list(idx)].sum(axis=1) for _, idx in head.keys], axis=1)
    names = [key for key, _ in head.keys]
    firing = [i for i, key in enumerate(names) if key in head.firing]
    chosen = columns[int(np.argmax(columns[:, firing].sum(axis=1)))]
    if head.condition in YES_NO_CONDITIONS:
        return round(min(1.0, max(0.0, float(chosen[0]))), DECIMALS)
    total = float(chosen.sum())
    dist = {key: round(float(p) / total, DECIMALS) for key, p in zip(names, chosen, strict=True)}
    # The rounding error goes to the largest class, so the distribution still sums to 1.
    largest = max(dist, key=lambda key: dist[key])
    dist[largest] = round(dist[largest] + 1.0 - sum(dist.values()), DECIMALS)
    return dist


# ---- a loaded model ---------------------------------------------------------------------------


class Classifier:
    """One model directory, loaded: its configuration, tokenizer and inference session.
    Thread-safe once built (onnxruntime's run and the tokenizer's encode both are)."""

    def __init__(self, directory: Path, *, threads: int = 1) -> None:
        self.directory = directory
        self.config = read_config(directory)
        for name in FILES:
            if not (directory / name).is_file():
                raise OnnxModelError(f"{directory / name}: missing")
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise OnnxModelError(f"{exc.name} is not installed; {INSTALL_HINT}") from None
        try:
            tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
        except Exception as exc:  # the library raises its own types for a bad file
            raise OnnxModelError(f"{directory / TOKENIZER_FILE}: cannot be read: {exc}") from None
        # Windows of max_length tokens, special tokens included, each overlapping the one
        # before by `stride`; padding is done here, per batch.
        window = self.config.max_length - tokenizer.num_special_tokens_to_add(False)
        if self.config.stride >= window:
            raise OnnxModelError(
                f"{directory / CONFIG_FILE}: stride: must be below {window} (max_length less "
                "the tokenizer's special tokens)"
            )
        tokenizer.no_padding()
        tokenizer.enable_truncation(self.config.max_length, stride=self.config.stride)
        self.tokenizer = tokenizer
        self.pad_id = _pad_id(tokenizer)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        try:
            self.session = onnxruntime.InferenceSession(
                str(directory / MODEL_FILE), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime's own error types, for a corrupt or odd file
            raise OnnxModelError(f"{directory / MODEL_FILE}: cannot be loaded: {exc}") from None
        self.feeds = {}
        for node in self.session.get_inputs():
            if node.name not in FEEDS:
                raise OnnxModelError(
                    f"{directory / MODEL_FILE}: input {node.name!r} is not one Guardian can "
                    f"feed ({', '.join(FEEDS)})"
                )
            self.feeds[node.name] = np.int32 if node.type == "tensor(int32)" else np.int64
        if "input_ids" not in self.feeds:
            raise OnnxModelError(f"{directory / MODEL_FILE}: has no input named input_ids")
        outputs = [node.name for node in self.session.get_outputs()]
        self.output = self.config.output or outputs[0]
        if self.output not in outputs:
            raise OnnxModelError(
                f"{directory / CONFIG_FILE}: output: the model has no output {self.output!r} "
                f"(it has {', '.join(outputs)})"
            )

    def windows(self, text: str) -> list:
        """`text`'s encodings, one per window of max_length tokens."""
        encoding = self.tokenizer.encode(text)
        return [encoding, *encoding.overflowing]

    def window_probabilities(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Per text, its windows' label probabilities (windows × labels), every window of
        every text scored in batches of BATCH_WINDOWS."""
        windows = [self.windows(text) for text in texts]
        flat = [w for text_windows in windows for w in text_windows]
        if not flat:
            return []
        scored = np.concatenate(
            [self._score(flat[i : i + BATCH_WINDOWS]) for i in range(0, len(flat), BATCH_WINDOWS)]
        )
        out, start = [], 0
        for text_windows in windows:
            out.append(scored[start : start + len(text_windows)])
            start += len(text_windows)
        return out

    def _score(self, encodings: list) -> np.ndarray:
        width = max(1, *(len(e.ids) for e in encodings))
        ids = np.full((len(encodings), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            n = len(encoding.ids)
            ids[row, :n] = encoding.ids
            # A text with no token at all (a tokenizer that adds no special tokens, reading an
            # empty output) is shown as one padding token: a model cannot read zero tokens.
            mask[row, : max(n, 1)] = 1
            types[row, :n] = encoding.type_ids
        arrays = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        feed = {name: arrays[name].astype(dtype) for name, dtype in self.feeds.items()}
        (scores,) = self.session.run([self.output], feed)
        return self._probabilities(np.asarray(scores, dtype=np.float64), len(encodings))

    def _probabilities(self, scores: np.ndarray, rows: int) -> np.ndarray:
        labels = len(self.config.labels)
        where = f"{self.directory / MODEL_FILE}: output {self.output!r}"
        if scores.shape != (rows, labels):
            raise OnnxModelError(
                f"{where} has shape {list(scores.shape)}, not [windows, {labels} labels]"
            )
        if not np.isfinite(scores).all():
            raise OnnxModelError(f"{where} is not finite")
        if self.config.scores == "logits":
            shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
            return shifted / shifted.sum(axis=1, keepdims=True)
        if (scores < 0).any() or (scores > 1).any() or (abs(scores.sum(axis=1) - 1) > 1e-3).any():
            raise OnnxModelError(
                f'{where} is not a probability per label (set "scores": "logits" if it gives '
                "logits)"
            )
        return scores


def _pad_id(tokenizer: object) -> int:
    padding = tokenizer.padding or {}
    if isinstance(padding.get("pad_id"), int):
        return padding["pad_id"]
    for token in ("[PAD]", "<pad>", "<|pad|>"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return found
    return 0  # masked out by the attention mask whatever it is


# Loaded once per process and directory, kept while its files are unchanged (size, time and
# inode of each); a directory that failed to load keeps its error until its files change, so
# a corrupt model is not re-read on every turn.
_LOADED: dict[tuple[Path, int], tuple[tuple, Classifier | OnnxModelError]] = {}
_DIGESTS: dict[Path, tuple[tuple, str]] = {}
_LOCK = threading.Lock()


def _signature(directory: Path) -> tuple | None:
    try:
        return tuple(
            (s.st_size, s.st_mtime_ns, s.st_ino)
            for s in ((directory / name).stat() for name in FILES)
        )
    except OSError:
        return None


def classifier_at(directory: Path, *, threads: int = 1) -> Classifier:
    """The model in `directory`, loaded at its first use in this process (or when its files
    changed). Raises OnnxModelError when it cannot answer."""
    key = (directory, threads)
    signature = _signature(directory)
    found = _LOADED.get(key)
    if found is None or found[0] != signature or signature is None:
        with _LOCK:
            found = _LOADED.get(key)
            if found is None or found[0] != signature or signature is None:
                try:
                    loaded: Classifier | OnnxModelError = Classifier(directory, threads=threads)
                except OnnxModelError as exc:
                    loaded = exc
                found = (signature, loaded)
                _LOADED[key] = found
    if isinstance(found[1], OnnxModelError):
        raise found[1]
    return found[1]


def directory_digest(directory: Path) -> str:
    """SHA-256 over the directory's three files (name and content), hashed once per process
    while they are unchanged; "missing" when one cannot be read."""
    signature = _signature(directory)
    if signature is None:
        return "missing"
    found = _DIGESTS.get(directory)
    if found is not None and found[0] == signature:
        return found[1]
    digest = hashlib.sha256()
    try:
        for name in FILES:
            digest.update(name.encode() + b"\0")
            with (directory / name).open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
    except OSError:
        return "missing"
    _DIGESTS[directory] = (signature, digest.hexdigest())
    return digest.hexdigest()


# ---- what a condition is shown ----------------------------------------------------------------


def texts(reads: str, projection: Mapping) -> list[str] | None:
    """The texts a condition's model scores, each cut into windows: every tool output on its
    own (an empty output when there is none, so the model still says what it says of
    nothing), the pending call, or the state; None when there is no pending call to read."""
    if reads == "tool_outputs":
        return _text_list(projection.get("last_results")) or [""]
    if reads == "pending_call":
        pending = projection.get("pending_proposal")
        if not isinstance(pending, Mapping):
            return None
        # The call's name, description and arguments; not the actor's stated intent, which is
        # the actor's word about the call, not the call.
        arguments = pending.get("arguments")
        shown = arguments if isinstance(arguments, str) else _json(arguments)
        return [
            f"tool: {pending.get('tool', '')}\n"
            f"description: {pending.get('description', '')}\n"
            f"arguments: {shown}"
        ]
    history = projection.get("history") if isinstance(projection.get("history"), list) else []
    lines = [
        f"goal: {projection.get('goal', '')}",
        "acceptance criteria:",
        *(f"- {c}" for c in _text_list(projection.get("acceptance_criteria"))),
        "history:",
        *(str(h.get("summary", "")) for h in history if isinstance(h, Mapping)),
        "tool outputs:",
        *_text_list(projection.get("last_results")),
    ]
    return ["\n".join(lines)]


def _text_list(value: object) -> list[str]:
    if not isinstance(value, list | tuple):
        return []
    return [v if isinstance(v, str) else _json(v) for v in value]


def _json(value: object) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError):
        return str(value)


# ---- the guardian -----------------------------------------------------------------------------


class OnnxGuardian:
    """The conditions of `models` ({condition: model directory}) answered by those models, the
    others by `fallback` (any guardian; None: they are malformed). It asks its own fixed
    questions (a model's question is its training), runs in process and spends nothing.

    `model_version` is the fallback's followed by "+onnx-" and the head of a hash over each
    routed condition and its directory's files: another model, tokenizer or configuration is
    another version, so calibration maps fitted on one are never applied to another."""

    takes_question_text = False
    spend: Spend = NOTHING

    def __init__(
        self,
        models: Mapping[Condition | str, Path | str],
        fallback: object | None = None,
        *,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        threads: int = 1,
    ) -> None:
        if not models:
            raise ValueError("models: name at least one condition and its model directory")
        self.routes = {Condition(c): Path(d) for c, d in models.items()}
        self.fallback = fallback
        self.deadline_seconds = deadline_seconds
        self.threads = threads
        routed = sorted((c.value, directory_digest(d)) for c, d in self.routes.items())
        head = hashlib.sha256(canonical_json(routed).encode()).hexdigest()[:12]
        base = getattr(fallback, "model_version", None)
        self.model_version = f"{base}+onnx-{head}" if base else f"onnx-{head}"
        asked = getattr(fallback, "question_set_version", None)
        self.question_set_version = f"{asked}+onnx" if asked else "onnx-fixed"

    def __repr__(self) -> str:
        routes = {c.value: str(d) for c, d in self.routes.items()}
        return f"OnnxGuardian({routes!r}, fallback={self.fallback!r})"

    def warm(self) -> float:
        """Load every routed model (and warm the fallback) now, e.g. when a worker starts;
        returns the seconds it took."""
        start = time.perf_counter()
        for directory in set(self.routes.values()):
            # A model that cannot load is left to fail its answers, each saying why.
            with contextlib.suppress(OnnxModelError):
                classifier_at(directory, threads=self.threads)
        warm = getattr(self.fallback, "warm", None)
        if callable(warm):
            warm()
        return time.perf_counter() - start

    def answer(self, projection: Mapping, conditions: Sequence[Condition]) -> dict[str, object]:
        """{condition: raw answer}: the fallback answers its conditions (under its own
        deadline, first: the local guardian takes well under a millisecond), then the models
        answer theirs under this guardian's deadline. Loading comes before the clock starts:
        a first use is slow, not late."""
        conditions = [Condition(c) for c in conditions]
        mine = [c for c in conditions if c in self.routes]
        rest = [c for c in conditions if c not in self.routes]
        answers: dict[str, object] = {}
        if rest:
            answers.update(self._fallback_answer(projection, rest))
        if mine:
            answers.update(self._timed(self._answers, [projection], mine)[0])
        return {c.value: answers.get(c.value, Malformed("no answer")) for c in conditions}

    def assess_risk(self, projections: Sequence[Mapping]) -> list[object]:
        """One risk answer per projection, by the risk model when risk is routed."""
        projections = list(projections)
        if Condition.RISK not in self.routes:
            if self.fallback is None:
                return [Malformed("no model answers risk") for _ in projections]
            return list(self.fallback.assess_risk(projections))
        rows = self._timed(self._answers, projections, [Condition.RISK])
        return [row[Condition.RISK.value] for row in rows]

    def model(self, condition: Condition) -> object:
        """What answers `condition` for a batch of projections (`.answers(projections)`): the
        evaluation harness scores trace sets through this, as it does the local guardian."""
        condition = Condition(condition)
        if condition in self.routes:
            return _Batch(self, condition)
        model = getattr(self.fallback, "model", None)
        if callable(model):
            return model(condition)
        return _Batch(self, condition)

    # -- inside ------------------------------------------------------------------------------

    def _fallback_answer(self, projection: Mapping, conditions: list[Condition]) -> dict:
        if self.fallback is None:
            return {c.value: Malformed(f"no model answers {c.value}") for c in conditions}
        return {str(k): v for k, v in dict(self.fallback.answer(projection, conditions)).items()}

    def _timed(self, ask, projections: list[Mapping], conditions: list[Condition]) -> list[dict]:
        """`ask(projections, conditions)` under the deadline, once every model is loaded;
        past the deadline every answer is Malformed saying so."""
        loaded = self._load(conditions)
        result = ask_concurrently(
            {"onnx": partial(ask, projections, conditions, loaded)},
            deadline_seconds=self.deadline_seconds,
        )["onnx"]
        if isinstance(result, Malformed):
            return [dict.fromkeys((c.value for c in conditions), result) for _ in projections]
        return result

    def _load(self, conditions: list[Condition]) -> dict[Condition, Classifier | Malformed]:
        loaded: dict[Condition, Classifier | Malformed] = {}
        for condition in conditions:
            try:
                classifier = classifier_at(self.routes[condition], threads=self.threads)
            except OnnxModelError as exc:
                loaded[condition] = Malformed(f"onnx model for {condition.value}: {exc}"[:300])
                continue
            if condition not in classifier.config.heads:
                loaded[condition] = Malformed(
                    f"onnx model for {condition.value}: {classifier.directory / CONFIG_FILE} "
                    f"has no entry conditions.{condition.value}"
                )
                continue
            loaded[condition] = classifier
        return loaded

    def _answers(
        self,
        projections: list[Mapping],
        conditions: list[Condition],
        loaded: Mapping[Condition, Classifier | Malformed],
    ) -> list[dict]:
        """Per projection, {condition: raw answer}. Conditions that read the same text of
        the same model share one inference."""
        out: list[dict] = [{} for _ in projections]
        groups: dict[tuple[int, str], list[Condition]] = {}
        for condition in conditions:
            classifier = loaded[condition]
            if isinstance(classifier, Malformed):
                for row in out:
                    row[condition.value] = classifier
                continue
            reads = classifier.config.heads[condition].reads
            groups.setdefault((id(classifier), reads), []).append(condition)
        for group in groups.values():
            classifier = loaded[group[0]]
            reads = classifier.config.heads[group[0]].reads
            shown = [texts(reads, p) for p in projections]
            asked = [i for i, t in enumerate(shown) if t is not None]
            try:
                scored = classifier.window_probabilities([t for i in asked for t in shown[i]])
            except OnnxModelError as exc:
                failure = Malformed(f"onnx model for {group[0].value}: {exc}"[:300])
                for row in out:
                    row.update(dict.fromkeys((c.value for c in group), failure))
                continue
            start = 0
            per_projection: dict[int, np.ndarray] = {}
            for i in asked:
                n = len(shown[i])
                per_projection[i] = np.concatenate(scored[start : start + n])
                start += n
            for i, row in enumerate(out):
                for condition in group:
                    head = classifier.config.heads[condition]
                    row[condition.value] = (
                        head_answer(head, per_projection[i])
                        if i in per_projection
                        else Malformed(NO_PENDING_CALL)
                    )
        return out


@dataclass(frozen=True)
class _Batch:
    """A batch of projections answered for one condition, without a deadline (the harness
    bounds its own batches)."""

    guardian: OnnxGuardian
    condition: Condition

    def answers(self, projections: Sequence[Mapping]) -> list[object]:
        projections = list(projections)
        if self.condition not in self.guardian.routes:
            return [
                self.guardian._fallback_answer(p, [self.condition])[self.condition.value]
                for p in projections
            ]
        loaded = self.guardian._load([self.condition])
        rows = self.guardian._answers(projections, [self.condition], loaded)
        return [row[self.condition.value] for row in rows]
