"""`python -m training.build_local_model [--out DIR]` (`make guardian-model`): fit the local
guardian on the corpus and write the model artefact and its manifest.

The artefact, `<MODEL_FAMILY>.json.gz`, holds per condition the plain state the runtime reads
(guardian_core/adapters/local_inference.py): vocabularies, idf values, weights, intercepts,
sigmoid maps, classes and extractor names. Its JSON has sorted keys and floats rounded to
SIGNIFICANT digits, and the gzip stream has no name and no time, so the same corpus and code
write the same bytes. The manifest, `<MODEL_FAMILY>.manifest.json`, records the model version,
the training digest, the SHA-256 of the artefact's JSON (uncompressed: a gzip stream's bytes may
vary with the zlib build, its contents do not) and the library versions that fitted it.
tests/test_local_model_artefact.py rebuilds it and checks the hash equals the committed one.
"""

import argparse
import gzip
import hashlib
import json
import platform
import time
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path

from threadpoolctl import threadpool_limits

from guardian_core.adapters.local import MODEL_DIR, MODEL_FAMILY, ConditionModel, artefact_paths
from guardian_core.engine.conditions import Condition
from training.compile import pipeline_state
from training.fit import TRAINING_DIR, corpus_examples, train, training_digest

FORMAT = 1
SIGNIFICANT = 12  # digits kept of every float: far finer than DECIMALS, coarser than noise
LIBRARIES = ("numpy", "scipy", "scikit-learn", "threadpoolctl")


def train_all(corpus: Path = TRAINING_DIR) -> dict[Condition, ConditionModel]:
    """Every condition's model, fitted on the corpus in `corpus`."""
    with threadpool_limits(limits=1):
        return {c: train(c, corpus_examples(c, corpus)) for c in Condition}


def _rounded(value: object) -> object:
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT}g}")
    if isinstance(value, Mapping):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(item) for item in value]
    return value


def artefact_json(models: Mapping[Condition, ConditionModel], digest: str) -> bytes:
    """The artefact's JSON bytes for `models`, fitted on a corpus of training digest `digest`."""
    states = {}
    for condition, model in models.items():
        state = pipeline_state(model.pipeline)
        if state is None:
            raise ValueError(f"{condition}: the fitted pipeline is not the shape the runtime reads")
        states[str(condition)] = state
    document = {
        "format": FORMAT,
        "model_family": MODEL_FAMILY,
        "model_version": f"{MODEL_FAMILY}+{digest[:12]}",
        "training_digest": digest,
        "conditions": states,
    }
    text = json.dumps(
        _rounded(document),
        sort_keys=True,
        ensure_ascii=False,
        allow_nan=False,
        separators=(",", ":"),
    )
    return (text + "\n").encode("utf-8")


def build(out: Path = MODEL_DIR, corpus: Path = TRAINING_DIR) -> dict:
    """Fit every condition on `corpus`, write the artefact and manifest into `out`; returns
    the manifest."""
    digest = training_digest(corpus)
    payload = artefact_json(train_all(corpus), digest)
    artefact, manifest_path = artefact_paths(out)
    out.mkdir(parents=True, exist_ok=True)
    # mtime=0 and no file name in the header: the same payload gives the same file.
    with artefact.open("wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as stream:
        stream.write(payload)
    manifest = {
        "artefact": artefact.name,
        "built_by": "python -m training.build_local_model",
        "libraries": {"python": platform.python_version()}
        | {name: version(name) for name in LIBRARIES},
        "model_family": MODEL_FAMILY,
        "model_version": f"{MODEL_FAMILY}+{digest[:12]}",
        "sha256": hashlib.sha256(payload).hexdigest(),
        "sha256_of": "the artefact's JSON, uncompressed",
        "training_digest": digest,
    }
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", "utf-8")
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=MODEL_DIR, help="where to write (%(default)s)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    manifest = build(args.out)
    print(
        f"{manifest['model_version']}: {args.out / manifest['artefact']} "
        f"sha256 {manifest['sha256']} ({time.perf_counter() - start:.1f} s)"
    )


if __name__ == "__main__":
    main()
