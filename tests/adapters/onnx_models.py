"""Tiny text classifiers built and exported to ONNX by the tests themselves: a bag of words
(Gather of an embedding per token, a masked mean, a MatMul and a bias) over a WordLevel
tokenizer, in a model directory as docs/adapters.md describes it. The embedding has one
dimension per label, so a word's vector says which label it pushes; the weights are chosen,
not learnt."""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")

INJECTION_WORDS = (
    *("ignore", "previous", "instructions", "disregard", "password", "forward"),
    *("admin", "attacker"),
)
INJECTION_LABELS = ["BENIGN", "INJECTION"]
# Every other word leans benign (1 on BENIGN), a trigger word strongly the other way; with the
# bias on BENIGN, plain text scores P(injection) ≈ 0.08 and a sentence with five trigger words
# in it well over 0.9.
INJECTION_VECTORS = {word: [0.0, 30.0] for word in INJECTION_WORDS}
INJECTION_DEFAULT = [1.0, 0.0]
INJECTION_BIAS = [1.5, 0.0]

RISK_LABELS = ["READ", "WRITE", "DELETE", "PAY"]
RISK_VECTORS = {
    **{w: [150.0, 0.0, 0.0, 0.0] for w in ("get", "list", "read", "search")},
    **{w: [0.0, 150.0, 0.0, 0.0] for w in ("update", "rename", "tag")},
    **{w: [0.0, 0.0, 150.0, 0.0] for w in ("delete", "send", "purge")},
    **{w: [0.0, 0.0, 0.0, 150.0] for w in ("refund", "pay", "transfer")},
}
RISK_CLASSES = {
    "read_only": ["READ"],
    "reversible_write": ["WRITE"],
    "irreversible": ["DELETE"],
    "regulated": ["PAY"],
}


def build_model(
    directory: Path,
    *,
    labels: Sequence[str],
    vectors: Mapping[str, Sequence[float]],
    default: Sequence[float],
    bias: Sequence[float],
    conditions: Mapping[str, object],
    max_length: int = 32,
    stride: int = 4,
) -> Path:
    """Write model.onnx, tokenizer.json and guardian.json into `directory`; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    words = sorted(vectors)
    vocab = {token: i for i, token in enumerate([*SPECIALS, *words])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.save(str(directory / "tokenizer.json"))

    width = len(labels)
    embedding = np.zeros((len(vocab), width), dtype=np.float32)
    # Unknown words and the special tokens count as ordinary text; padding is masked out.
    for token in SPECIALS[1:]:
        embedding[vocab[token]] = default
    for word in words:
        embedding[vocab[word]] = vectors[word]
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["embedding", "input_ids"], ["vectors"]),
            helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["mask", "axis2"], ["mask3"]),
            helper.make_node("Mul", ["vectors", "mask3"], ["masked"]),
            helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
            helper.make_node("ReduceSum", ["mask3", "axis1"], ["count"], keepdims=0),
            helper.make_node("Div", ["summed", "count"], ["mean"]),
            helper.make_node("MatMul", ["mean", "weights"], ["scaled"]),
            helper.make_node("Add", ["scaled", "bias"], ["logits"]),
        ],
        "bag_of_words",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", width])],
        [
            numpy_helper.from_array(embedding, "embedding"),
            numpy_helper.from_array(np.eye(width, dtype=np.float32), "weights"),
            numpy_helper.from_array(np.asarray(bias, dtype=np.float32), "bias"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by any onnxruntime of the last years
    onnx.checker.check_model(model)
    onnx.save(model, str(directory / "model.onnx"))

    config = {
        "labels": list(labels),
        "max_length": max_length,
        "stride": stride,
        "output": "logits",
        "scores": "logits",
        "conditions": dict(conditions),
    }
    (directory / "guardian.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return directory


def build_injection_model(directory: Path, **options) -> Path:
    """A Prompt-Guard-like model: integrity is P(INJECTION)."""
    return build_model(
        directory,
        labels=INJECTION_LABELS,
        vectors=INJECTION_VECTORS,
        default=INJECTION_DEFAULT,
        bias=INJECTION_BIAS,
        conditions={"integrity": {"yes": ["INJECTION"]}},
        **options,
    )


def build_risk_model(directory: Path, **options) -> Path:
    """A four-label model of what a call does: risk is its classes."""
    return build_model(
        directory,
        labels=RISK_LABELS,
        vectors=RISK_VECTORS,
        default=[0.0] * 4,
        bias=[0.5, 0.0, 0.0, 0.0],
        conditions={"risk": {"classes": RISK_CLASSES}},
        **options,
    )
