"""A model directory's configuration for the bring-your-own-model guardian
(onnx_classifier.py): the deployment's routes (GUARDIAN_ONNX_MODELS, {condition: directory})
and each directory's `guardian.json`, checked with every bad field named. Plain Python, no
numpy: the settings read the routes at start, and a web process should not load numpy for it.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from guardian_core.engine.conditions import (
    DRIFT_MISALIGNED_MAX_SCORE,
    DRIFT_SCORES,
    YES_NO_CONDITIONS,
    Condition,
    RiskClass,
)

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "guardian.json"
FILES = (CONFIG_FILE, TOKENIZER_FILE, MODEL_FILE)

# What a condition's model is shown: each tool output on its own, the pending call, or the
# run's state as text (onnx_classifier.texts).
READS = ("tool_outputs", "pending_call", "state")
DEFAULT_READS = {Condition.INTEGRITY: "tool_outputs", Condition.RISK: "pending_call"}
DEFAULT_MAX_LENGTH = 512
MAX_LENGTH_RANGE = (8, 8192)


class OnnxModelError(RuntimeError):
    """A model directory that cannot answer: a file missing or unreadable, its configuration
    invalid (the message names the file and the field), a model whose inputs or outputs do not
    fit, or onnxruntime / tokenizers not installed."""


# ---- the deployment's routes: GUARDIAN_ONNX_MODELS ------------------------------------------


def onnx_routes(raw: object) -> dict[Condition, Path]:
    """{condition: model directory} from the setting's JSON value, every directory absolute.

    Raises ValueError naming every bad entry. Whether a directory holds a usable model is
    checked when it is first used (a broken one makes its conditions' answers malformed), not
    here: a model being replaced must not stop the web server from starting."""
    if not isinstance(raw, Mapping):
        raise ValueError('must be a JSON object {"condition": "/absolute/model/directory"}')
    problems: list[str] = []
    routes: dict[Condition, Path] = {}
    for name, directory in raw.items():
        try:
            condition = Condition(name)
        except ValueError:
            known = ", ".join(c.value for c in Condition)
            problems.append(f"{name}: not a condition (known: {known})")
            continue
        if not isinstance(directory, str) or not directory.strip():
            problems.append(f"{name}: must be the model directory's path as text")
        elif not Path(directory.strip()).is_absolute():
            problems.append(f"{name}: must be an absolute path, got {directory!r}")
        else:
            routes[condition] = Path(directory.strip())
    if problems:
        raise ValueError("; ".join(problems))
    return routes


# ---- a directory's configuration: guardian.json ---------------------------------------------


@dataclass(frozen=True)
class Head:
    """How one condition reads the model's output: the text it is shown (`reads`) and, per
    key of its raw answer ("yes", a risk class, a drift score), the labels whose
    probabilities add up to it."""

    condition: Condition
    reads: str
    keys: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def firing(self) -> frozenset[str]:
        """The answer keys whose probability the policy compares with the threshold."""
        if self.condition == Condition.RISK:
            return frozenset(c.value for c in RiskClass if c.needs_approval)
        if self.condition == Condition.DRIFT:
            return frozenset(str(s) for s in DRIFT_SCORES if s <= DRIFT_MISALIGNED_MAX_SCORE)
        return frozenset(["yes"])


@dataclass(frozen=True)
class ModelConfig:
    labels: tuple[str, ...]
    max_length: int
    stride: int
    output: str | None  # the model output holding the scores; None: its first output
    scores: str  # "logits" (a softmax is applied) or "probabilities" (used as given)
    heads: Mapping[Condition, Head]


_CONFIG_KEYS = {"labels", "max_length", "stride", "output", "scores", "conditions"}


def parse_config(raw: object) -> ModelConfig:
    """guardian.json's content checked; ValueError naming every bad field ("field: problem")."""
    if not isinstance(raw, Mapping):
        raise ValueError("must be a JSON object")
    problems = [f"{key}: unknown key" for key in sorted(set(raw) - _CONFIG_KEYS)]
    labels = raw.get("labels")
    if (
        not isinstance(labels, list)
        or len(labels) < 2
        or not all(isinstance(label, str) and label for label in labels)
        or len(set(labels)) != len(labels)
    ):
        problems.append("labels: must list the model's output labels in order, 2 or more names")
        labels = []
    max_length = raw.get("max_length", DEFAULT_MAX_LENGTH)
    low, high = MAX_LENGTH_RANGE
    if not _is_int(max_length) or not low <= max_length <= high:
        problems.append(f"max_length: must be a whole number of tokens from {low} to {high}")
        max_length = DEFAULT_MAX_LENGTH
    stride = raw.get("stride", max_length // 8)
    if not _is_int(stride) or not 0 <= stride < max_length // 2:
        problems.append(f"stride: must be a whole number of tokens from 0 to {max_length // 2 - 1}")
        stride = 0
    output = raw.get("output")
    if output is not None and (not isinstance(output, str) or not output):
        problems.append("output: must be the name of the model's output (or left out)")
    scores = raw.get("scores", "logits")
    if scores not in ("logits", "probabilities"):
        problems.append('scores: must be "logits" or "probabilities"')
    conditions = raw.get("conditions")
    heads: dict[Condition, Head] = {}
    if not isinstance(conditions, Mapping) or not conditions:
        problems.append("conditions: must name at least one condition the model answers")
    else:
        for name, entry in conditions.items():
            head = _head(str(name), entry, labels, problems)
            if head is not None:
                heads[head.condition] = head
    if problems:
        raise ValueError("; ".join(problems))
    return ModelConfig(tuple(labels), max_length, stride, output, scores, heads)


def _head(name: str, entry: object, labels: list[str], problems: list[str]) -> Head | None:
    where = f"conditions.{name}"
    try:
        condition = Condition(name)
    except ValueError:
        problems.append(
            f"{where}: not a condition (known: {', '.join(c.value for c in Condition)})"
        )
        return None
    if not isinstance(entry, Mapping):
        problems.append(f"{where}: must be an object")
        return None
    before = len(problems)
    reads = entry.get("reads", DEFAULT_READS.get(condition, "state"))
    if reads not in READS:
        problems.append(f"{where}.reads: must be one of {', '.join(READS)}")
    if condition in YES_NO_CONDITIONS:
        allowed = {"reads", "yes"}
        wanted = {"yes": entry.get("yes")}
    else:
        allowed = {"reads", "classes"}
        classes = entry.get("classes")
        keys = (
            [c.value for c in RiskClass]
            if condition == Condition.RISK
            else [str(s) for s in DRIFT_SCORES]
        )
        if not isinstance(classes, Mapping) or set(classes) != set(keys):
            problems.append(f"{where}.classes: must map each of {', '.join(keys)} to labels")
            return None
        wanted = {key: classes[key] for key in keys}
    problems += [f"{where}.{key}: unknown key" for key in sorted(set(entry) - allowed)]
    resolved = []
    for key, named in wanted.items():
        field = f"{where}.yes" if key == "yes" else f"{where}.classes.{key}"
        if not isinstance(named, list) or not all(isinstance(label, str) for label in named):
            problems.append(f"{field}: must be a list of label names")
            continue
        unknown = [label for label in named if label not in labels]
        if unknown and labels:
            problems.append(f"{field}: {', '.join(map(repr, unknown))} not among labels")
        resolved.append((key, tuple(labels.index(label) for label in named if label in labels)))
    if condition in YES_NO_CONDITIONS and resolved and not resolved[0][1]:
        problems.append(f"{where}.yes: must name at least one label")
    if condition not in YES_NO_CONDITIONS and labels and len(resolved) == len(wanted):
        # Every label in exactly one class: the classes' probabilities then sum to 1.
        placed = [i for _, idx in resolved for i in idx]
        twice = sorted({labels[i] for i in placed if placed.count(i) > 1})
        left = [label for i, label in enumerate(labels) if i not in placed]
        if twice:
            problems.append(f"{where}.classes: {', '.join(twice)} in more than one class")
        if left:
            problems.append(f"{where}.classes: {', '.join(left)} in no class")
    if len(problems) > before:
        return None
    return Head(condition, reads, tuple(resolved))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_config(directory: Path) -> ModelConfig:
    path = directory / CONFIG_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OnnxModelError(f"{path}: missing") from None
    except (OSError, ValueError) as exc:
        raise OnnxModelError(f"{path}: cannot be read: {exc}") from None
    try:
        return parse_config(raw)
    except ValueError as exc:
        raise OnnxModelError(f"{path}: {exc}") from None
