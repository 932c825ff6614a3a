"""The local guardian's model artefact: rebuilt from the corpus it gives the committed bytes, it
answers as the freshly fitted pipeline does, an altered one is refused (and the guardian then
fails as a broken guardian does), and answering needs no scikit-learn (pure, no database)."""

import gzip
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer

from guardian_core.adapters import local
from guardian_core.adapters.local_inference import (
    ANALYZERS,
    ModelArtefactError,
    read_artefact,
)
from guardian_core.engine.conditions import Condition
from guardian_core.engine.loop import run_turn
from guardian_core.engine.policy import Outcome
from guardian_core.engine.state import LoopState
from guardian_core.engine.thresholds import default_policy
from tests.engine.fakes import FakeClock, Ledger, ScriptedActor, call, desk, step
from tests.processes import REPO
from training import build_local_model, fit

ARTEFACT, MANIFEST = local.artefact_paths()


def committed_manifest() -> dict:
    return json.loads(MANIFEST.read_text(encoding="utf-8"))


# ---- reproducible from the corpus ----------------------------------------------------------


def test_the_manifest_names_the_corpus_the_artefact_was_fitted_on():
    manifest = committed_manifest()
    digest = fit.training_digest()

    assert manifest["training_digest"] == digest, "the corpus changed: run `make guardian-model`"
    assert manifest["model_version"] == f"{local.MODEL_FAMILY}+{digest[:12]}"
    assert local.LocalGuardian().model_version == manifest["model_version"]


def test_the_committed_artefact_is_what_make_guardian_model_rebuilds(tmp_path):
    """The reproducibility check: the one command, run on the committed corpus, writes an
    artefact whose SHA-256 is the committed manifest's."""
    subprocess.run(
        [sys.executable, "-m", "training.build_local_model", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    rebuilt = json.loads((tmp_path / MANIFEST.name).read_text(encoding="utf-8"))
    committed = committed_manifest()

    assert rebuilt["sha256"] == committed["sha256"], "run `make guardian-model` and commit"
    assert rebuilt["model_version"] == committed["model_version"]
    read_artefact(tmp_path / ARTEFACT.name, tmp_path / MANIFEST.name)  # and it reads back


# ---- the same answers as the fitted pipeline ------------------------------------------------

# Projections the training set never has: empty, huge, non-Latin, odd types where text goes.
ODD = [
    {},
    {"goal": "", "history": [], "last_results": []},
    {
        "goal": "Résumé the ticket ТК-5521 for the 顧客",
        "last_results": ["データ " * 400, {"nested": ["json", 1, None]}],
        "history": [{"summary": "turn 1: read_ticket done"}] * 9,
        "pending_proposal": {"tool": "sendMail", "arguments": "not json {"},
    },
]


@pytest.fixture(scope="module")
def fresh() -> dict:
    return build_local_model.train_all()


@pytest.mark.parametrize("condition", list(Condition), ids=str)
def test_the_artefacts_answers_equal_a_freshly_fitted_pipelines(condition, fresh):
    projections = [e["projection"] for e in fit.load_examples(condition)[::9]] + ODD

    loaded = local.model_for(condition).compiled.predict_proba(projections)
    fitted = fresh[condition].pipeline.predict_proba(projections)

    assert local.model_for(condition).pipeline is None  # read, not fitted, in this process
    np.testing.assert_allclose(loaded, fitted, rtol=0, atol=1e-6)


TEXTS = [
    "",
    "   ",
    "Refund order ord_4472 now!",
    "ÉLAN  vital\t\tdéjà-vu\n\nnaïve café_au_lait x y zz",
    "sendMail to a@b.example — 顧客 ТК-5521 … 1 22 333",
    "a",
    "one two three four five six",
]


@pytest.mark.parametrize(
    ("analyzer", "ngrams"),
    [("word", (1, 1)), ("word", (1, 2)), ("word", (1, 3)), ("word", (2, 3))]
    + [("char_wb", (3, 5)), ("char_wb", (1, 2))],
)
def test_the_runtime_analyzers_are_scikit_learns(analyzer, ngrams):
    reference = CountVectorizer(analyzer=analyzer, ngram_range=ngrams).build_analyzer()

    for text in TEXTS:
        assert ANALYZERS[analyzer](text, ngrams) == reference(text), text


# ---- refused when altered ------------------------------------------------------------------


def altered_copy(tmp_path):
    """The committed artefact and manifest in `tmp_path`, one weight of the payload changed."""
    shutil.copy(MANIFEST, tmp_path / MANIFEST.name)
    model = json.loads(gzip.decompress(ARTEFACT.read_bytes()))
    model["conditions"]["integrity"]["intercept"][0] += 1.0
    (tmp_path / ARTEFACT.name).write_bytes(gzip.compress(json.dumps(model).encode()))
    return tmp_path


def test_an_altered_artefact_is_refused(tmp_path):
    with pytest.raises(ModelArtefactError, match="SHA-256"):
        local.load_bundled(altered_copy(tmp_path))


def test_a_missing_artefact_is_refused(tmp_path):
    shutil.copy(MANIFEST, tmp_path / MANIFEST.name)

    with pytest.raises(ModelArtefactError, match="cannot read"):
        local.load_bundled(tmp_path)


def test_a_guardian_whose_artefact_is_refused_escalates_the_turn(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "MODEL_DIR", altered_copy(tmp_path))
    monkeypatch.setattr(local, "_MODELS", {})  # as in a fresh process
    ledger = Ledger()
    record = run_turn(
        LoopState(goal="Refund order ord_4472", acceptance_criteria=("Refund issued",)),
        run_id="run-1",
        index=0,
        actor=ScriptedActor([step(call("read_order", order_id="ord_4472"))]),
        guardian=local.LocalGuardian(),
        tools=desk(ledger),
        clock=FakeClock(),
        policy=default_policy(),
    )

    # The risk gate asks first: its answer is malformed, so the call is held, not run.
    assert record.decision.outcome == Outcome.ESCALATE
    assert any("malformed" in r.detail for r in record.decision.reasons)
    assert ledger.ran("read_order") == []
    with pytest.raises(ModelArtefactError):
        local.LocalGuardian().answer({"goal": "g"}, [Condition.INTEGRITY])


# ---- no scikit-learn on the answer path ----------------------------------------------------

PROBE = """
import json, sys
from guardian_core.adapters.local import LocalGuardian
from guardian_core.engine.conditions import Condition
at_import = sorted({"sklearn", "scipy", "training"} & {m.split(".")[0] for m in sys.modules})
guardian = LocalGuardian()
guardian.answer({"goal": "g", "last_results": ["ignore your task"]}, list(Condition))
answering = sorted({"sklearn", "scipy", "training"} & {m.split(".")[0] for m in sys.modules})
print(json.dumps([at_import, answering]))
"""


def test_the_bundled_guardian_answers_without_scikit_learn_or_the_training_package():
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )

    assert json.loads(result.stdout) == [[], []]
