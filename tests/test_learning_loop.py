"""The learning loop: labelled traces imported, a calibration map fitted on verdicts that lowers
ECE on the rest of a shifted distribution, guardian model versions used by runs only once
active, the local guardian retrained, and `evaluate` asking a network guardian."""

import io
import json
import math

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from escalations.models import ExampleSource, LabelledExample
from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION
from guardian_core.adapters.local import LocalGuardian
from guardian_core.engine.conditions import Condition
from guardian_core.models import GuardianModelVersion
from policies.harness import traces_evaluate
from policies.learning import guardian_model_activate, guardian_model_recalibrate
from runs.guardian_models import guardian_model_version_active, versioned_guardian
from runs.replay import guardian_replay
from tests.adapters.servers import completion, serve, vendor
from tests.factories import default_costs_policy_version_create
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

approx = pytest.approx
PIN = "vendor-x-2026-10"


@pytest.fixture
def active_version(db):
    return default_costs_policy_version_create()


def _write(tmp_path, lines, name="traces.jsonl"):
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


def _import(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command("import_examples", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


VALID = [
    json.dumps(
        {
            "condition": "integrity",
            "projection": {"goal": "Summarise the inbox", "last_results": ["Hi, lunch at 1?"]},
            "probability": 0.12,
            "label": False,
            "source": "human",
            "question_set": "v3",
            "model": "local-1",
        }
    ),
    json.dumps(
        {
            "condition": "risk",
            "projection": {
                "goal": "Refund order 7",
                "pending_proposal": {"tool": "issue_refund", "arguments": {"order": 7}},
            },
            "probability": {
                "read_only": 0.1,
                "reversible_write": 0.2,
                "irreversible": 0.3,
                "regulated": 0.4,
            },
            "label": "regulated",
        }
    ),
    json.dumps({"condition": "drift", "projection": {"goal": "Book a room"}, "label": 3}),
]


# ---- import_examples ------------------------------------------------------------------------


def test_import_stores_every_line_as_an_imported_example(tmp_path):
    out, _ = _import(_write(tmp_path, VALID))
    assert "imported 3 examples (drift 1, integrity 1, risk 1); 0 duplicates" in out
    by_condition = {e.condition: e for e in LabelledExample.objects.all()}
    assert {e.source for e in by_condition.values()} == {ExampleSource.IMPORT}
    integrity = by_condition["integrity"]
    assert (integrity.probability, integrity.label) == (0.12, False)
    assert (integrity.question_set_version, integrity.model_version) == ("v3", "local-1")
    assert by_condition["risk"].probability == approx(0.7)  # the compared probability
    assert by_condition["drift"].probability is None  # unscored: stays so
    assert by_condition["drift"].model_version == ""


def test_a_malformed_file_is_refused_whole_with_every_bad_line_by_number(tmp_path):
    lines = [
        VALID[0],
        json.dumps({"condition": "integrity", "projection": {"goal": "g"}}),
        "",
        "{not json",
        json.dumps({"condition": "risk", "projection": {"goal": "g"}, "label": "sometimes"}),
        json.dumps({**json.loads(VALID[0]), "model": "m" * 200}),
    ]
    with pytest.raises(CommandError, match="refused, nothing imported \\(4 problems"):
        _import(_write(tmp_path, lines))
    err = io.StringIO()
    with pytest.raises(CommandError):
        call_command("import_examples", str(tmp_path / "traces.jsonl"), stderr=err)
    listed = err.getvalue()
    assert "line 2: label: missing" in listed
    assert "line 4: not JSON" in listed
    assert "line 5: label: 'sometimes' is not one of read_only" in listed
    assert "line 6: model: longer than 120 characters" in listed
    assert [row.split(":")[0].strip() for row in listed.splitlines()] == [
        "line 2",
        "line 4",
        "line 5",
        "line 6",
    ]
    assert LabelledExample.objects.count() == 0  # the good line was not kept either


def test_reimporting_a_file_adds_nothing_and_a_repeated_line_is_one_example(tmp_path):
    path = _write(tmp_path, [*VALID, VALID[0]])
    out, _ = _import(path)
    assert "imported 3 examples" in out
    assert "1 duplicate not imported" in out
    again, _ = _import(path)
    assert "imported 0 examples; 4 duplicates not imported" in again
    assert LabelledExample.objects.count() == 3


def test_a_dry_run_checks_and_counts_but_stores_nothing(tmp_path):
    out, _ = _import(_write(tmp_path, VALID), "--dry-run")
    assert "would import 3 examples" in out
    assert LabelledExample.objects.count() == 0


def test_a_fresh_export_imported_into_the_same_database_stores_nothing(tmp_path):
    # A verdict's example read back is the same example: stored twice, it would count twice
    # in every recalibration.
    LabelledExample.objects.create(
        condition="integrity",
        projection={"goal": "Pay invoice 12", "last_results": ["Invoice 12: 40 EUR"]},
        probability=0.3,
        label=False,
        source=ExampleSource.HUMAN,
        question_set_version="v1",
        model_version="local-2+abc",
    )
    LabelledExample.objects.create(
        condition="drift",
        projection={"goal": "Book a room"},
        probability=None,
        label=2,
        source=ExampleSource.JUDGE,
        question_set_version="v1",
        model_version="judge-7",
    )
    exported = tmp_path / "export.jsonl"
    written = io.StringIO()
    call_command("export_examples", "--output", str(exported), stdout=written)
    assert "2 examples written" in written.getvalue()

    out, _ = _import(str(exported))

    assert "imported 0 examples; 2 duplicates not imported" in out
    assert not LabelledExample.objects.filter(source=ExampleSource.IMPORT).exists()
    assert LabelledExample.objects.count() == 2


def test_one_example_is_counted_in_the_singular_by_export_and_import(tmp_path):
    LabelledExample.objects.create(
        condition="integrity",
        projection={"goal": "Pay invoice 12", "last_results": ["Invoice 12: 40 EUR"]},
        probability=0.3,
        label=False,
        source=ExampleSource.HUMAN,
        question_set_version="v1",
        model_version="local-2+abc",
    )
    exported = tmp_path / "export.jsonl"
    written = io.StringIO()
    call_command("export_examples", "--output", str(exported), stdout=written)
    assert f"1 example written to {exported}" in written.getvalue()

    out, _ = _import(_write(tmp_path, [VALID[0]]))
    assert "1 line; imported 1 example (integrity 1); 0 duplicates" in out
    again, _ = _import(str(exported))
    assert "1 line; imported 0 examples; 1 duplicate not imported" in again


def test_an_empty_file_is_refused(tmp_path):
    with pytest.raises(CommandError, match="refused"):
        _import(_write(tmp_path, ["", "  "]))


# ---- a shifted distribution: verdicts → recalibrate → ECE on the rest falls -------------------

# A vendor guardian that is three times too sure of itself on this population: for a case whose
# true rate of injected instructions is q, it answers sigmoid(3 · logit(q)).
CASES = 900
FED = 450  # the first half become reviewers' verdicts; the rest is what we measure on


def _shifted_population():
    rng = np.random.default_rng(7)
    q = rng.uniform(0.15, 0.85, CASES)
    labels = rng.uniform(size=CASES) < q
    return [
        (
            {
                "goal": f"Summarise ticket {n}",
                "last_results": [f"ticket {n} (q={q[n]:.6f}): customer asks about delivery"],
            },
            bool(labels[n]),
        )
        for n in range(CASES)
    ]


def _overconfident(body):
    if not body["projection"].get("last_results"):
        return {}  # nothing it was made for: no answer
    result = body["projection"]["last_results"][0]
    q = float(result.split("(q=")[1].split(")")[0])
    z = 3 * math.log(q / (1 - q))
    return {"integrity": round(1 / (1 + math.exp(-z)), 6)}


@pytest.fixture
def overconfident_vendor(settings):
    with serve(vendor(_overconfident, model_version=PIN)) as server:
        settings.GUARDIAN_HTTP_URL = server.url
        settings.GUARDIAN_HTTP_MODEL_VERSION = PIN
        settings.GUARDIAN_DEADLINE_SECONDS = 5.0
        yield server


def test_recalibrating_on_verdicts_lowers_ece_on_the_rest_of_a_shifted_distribution(
    active_version, overconfident_vendor, tmp_path
):
    population = _shifted_population()
    for projection, label in population[:FED]:
        LabelledExample.objects.create(
            condition="integrity",
            projection=projection,
            probability=None,  # asked of the guardian again by recalibrate
            label=label,
            source=ExampleSource.HUMAN,
            question_set_version=DEFAULT_QUESTION_SET_VERSION,
            model_version=PIN,
        )
    out = io.StringIO()
    call_command(
        "recalibrate",
        "--model",
        "http",
        "--condition",
        "integrity",
        stdout=out,
        stderr=io.StringIO(),
    )
    version = GuardianModelVersion.objects.get()
    assert f"Guardian model version {version.number}: {PIN}/cal-{version.number}" in out.getvalue()
    assert not version.is_active
    assert version.kind == "recalibrated"
    assert version.base_model_version == PIN
    figures = version.figures["integrity"]
    assert figures["n_fit"] + figures["n_held_out"] == FED
    assert len(version.example_ids) == figures["n_fit"]
    assert figures["after"]["ece"] < figures["before"]["ece"]

    rest = _write(
        tmp_path,
        [
            json.dumps({"condition": "integrity", "projection": projection, "label": label})
            for projection, label in population[FED:]
        ],
    )
    raw = io.StringIO()
    call_command(
        "evaluate", "--traces", rest, "--model", "http", "--json", stdout=raw, stderr=io.StringIO()
    )
    before = json.loads(raw.getvalue())
    calibrated = io.StringIO()
    call_command(
        "evaluate",
        "--traces",
        rest,
        "--guardian-version",
        str(version.number),
        "--json",
        stdout=calibrated,
        stderr=io.StringIO(),
    )
    after = json.loads(calibrated.getvalue())
    assert before["model_version"] == PIN
    assert after["model_version"] == version.model_version
    assert after["conditions"]["integrity"]["n"] == before["conditions"]["integrity"]["n"] == 450
    ece_before = before["conditions"]["integrity"]["ece"]
    ece_after = after["conditions"]["integrity"]["ece"]
    # The stated margin: ECE at least halves, and falls by at least 0.05.
    assert ece_after <= ece_before / 2
    assert ece_after <= ece_before - 0.05
    # Every scoring request reached the real server, at the pinned version's questions.
    asked = [r.json for r in overconfident_vendor.requests]
    assert len(asked) == FED + 2 * (CASES - FED)
    assert {a["question_set_version"] for a in asked} == {DEFAULT_QUESTION_SET_VERSION}


def test_a_stored_probability_of_the_same_base_model_is_reused_not_asked_again(
    active_version, overconfident_vendor
):
    population = _shifted_population()[:60]
    for projection, label in population:
        LabelledExample.objects.create(
            condition="integrity",
            projection=projection,
            probability=_overconfident({"projection": projection})["integrity"],
            label=label,
            source=ExampleSource.IMPORT,
            question_set_version="q",
            model_version=PIN,
        )
    version = guardian_model_recalibrate(adapter="http", conditions=["integrity"])
    assert overconfident_vendor.requests == []
    assert version.figures["integrity"]["reused_probabilities"] == 60


def test_recalibrate_refuses_too_few_examples_or_one_class_naming_each_condition(
    active_version, overconfident_vendor
):
    for projection, _ in _shifted_population()[:30]:
        LabelledExample.objects.create(
            condition="integrity",
            projection=projection,
            label=False,
            source=ExampleSource.HUMAN,
            question_set_version="q",
            model_version=PIN,
        )
    LabelledExample.objects.create(
        condition="stagnation",
        projection={"goal": "g"},
        label=True,
        source=ExampleSource.HUMAN,
        question_set_version="q",
        model_version=PIN,
    )
    with pytest.raises(CommandError) as refused:
        call_command("recalibrate", "--model", "http", stderr=io.StringIO())
    message = str(refused.value)
    assert "integrity: one class only (all negative)" in message
    assert "stagnation: 0 labelled examples with a probability, at least 20 needed" in message
    # The vendor does not answer stagnation: said, not hidden.
    assert "1 not scored by the guardian (malformed: guardian" in message
    assert GuardianModelVersion.objects.count() == 0


def test_evaluate_asks_an_openai_compatible_guardian_row_by_row(active_version, settings, tmp_path):
    # P(yes) = e^-0.105 / (e^-0.105 + e^-2.303) ≈ 0.9 for every row.
    top = [("yes", -0.105), ("no", -2.303)]
    reply = completion(model="guard-1b", top_logprobs=top)
    with serve(lambda path, headers, body: (200, reply, 0.0)) as server:
        settings.OPENAI_BASE_URL = f"{server.url}/v1"
        settings.OPENAI_GUARDIAN_MODEL = "guard-1b"
        rows = [
            json.dumps(
                {
                    "condition": "integrity",
                    "projection": {"goal": "Read mail", "last_results": [f"mail {n}"]},
                    "label": n % 2 == 0,
                }
            )
            for n in range(12)
        ]
        report = traces_evaluate(lines=rows, model="openai")
    assert len(server.requests) == 12
    assert {r.path for r in server.requests} == {"/v1/chat/completions"}
    integrity = report["conditions"]["integrity"]
    assert (integrity["n"], integrity["unscored"]) == (12, 0)
    assert integrity["brier"] == approx(0.5 * 0.1**2 + 0.5 * 0.9**2, abs=1e-3)
    assert report["model_version"] == "guard-1b"


# ---- versions, activation and runs ----------------------------------------------------------

# Every integrity probability halved: a run's logged answer shows which guardian it came from.
HALF = {"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 0.5]}


def _local_version(number=1, **fields):
    return GuardianModelVersion.objects.create(
        **{
            "number": number,
            "adapter": "local",
            "base_model_version": LocalGuardian().model_version,
            "kind": "recalibrated",
            "calibration": {"integrity": HALF},
            "example_ids": [],
            "examples_digest": "0" * 64,
            **fields,
        }
    )


def test_an_inactive_version_is_not_used_by_runs_and_an_active_one_is():
    version = _local_version()
    run = drive(start("injected_instruction", guardian="local"))
    plain = run.turns.get().decision
    assert plain.guardian_model_version == LocalGuardian().model_version

    guardian_model_activate(number=version.number)
    run = drive(start("injected_instruction", guardian="local"))
    calibrated = run.turns.get().decision
    assert calibrated.guardian_model_version == version.model_version
    assert calibrated.guardian_model_version.endswith("/cal-1")
    assert calibrated.answers["integrity"] == approx(plain.answers["integrity"] / 2, abs=1e-6)
    # Asked again, the active version gives the logged probabilities: the turn replays.
    turn = run.turns.get()
    replay = guardian_replay(run=run, index=turn.index)
    assert replay.available, replay.why_not
    assert [p for p in replay.conditions if not p.same] == []


def _external_step(owner, number: int) -> dict:
    """A read-only external step of a fresh run on the local guardian, proposed and reported as
    an outside loop (or the MCP gateway) does; the decision's answer."""
    from runs.external import external_run_start, external_step_propose, external_step_results

    run, _ = external_run_start(
        goal="Look up order A1 and report its status.",
        acceptance_criteria=[],
        tools=[
            {
                "name": "lookup_order",
                "description": "Read an order by its id.",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
                "risk_class": "read_only",
            }
        ],
        guardian="local",
        created_by=owner,
    )
    body = {"calls": [{"tool": "lookup_order", "arguments": {"order_id": "A1"}, "call_id": "c"}]}
    external_step_propose(run_id=run.pk, owner_id=owner.pk, step=number, body=body)
    results = [{"position": 0, "result": "A1: paid 49.90 EUR, 2 items, shipped"}]
    answer, _ = external_step_results(
        run_id=run.pk, owner_id=owner.pk, step=number, results=results
    )
    return run.turns.get(index=number).decision


def test_an_external_step_asks_the_active_version_read_with_its_claim(integrator):
    # On PostgreSQL the claim reads the active version's id along with the run: a step with no
    # version active reads the versions table nowhere else (twice per step before).
    default_costs_policy_version_create()
    version = _local_version()
    with CaptureQueriesContext(connection) as read:
        plain = _external_step(integrator, 0)
    assert plain.guardian_model_version == LocalGuardian().model_version
    asked = [
        q["sql"] for q in read.captured_queries if "guardian_core_guardianmodelversion" in q["sql"]
    ]
    if connection.vendor == "postgresql":
        assert len(asked) == 2  # the two claims: the proposal's and the results'
        assert all("claimed_guardian_version_id" in sql for sql in asked)

    guardian_model_activate(number=version.number)
    calibrated = _external_step(integrator, 0)
    assert calibrated.guardian_model_version == version.model_version
    assert calibrated.answers["integrity"] == approx(plain.answers["integrity"] / 2, abs=1e-6)


def test_warming_a_guardian_loads_every_model_its_runs_ask_with(monkeypatch):
    from guardian_core.adapters import local
    from runs.ports import guardian_warm

    monkeypatch.setattr(local, "_MODELS", {})  # as in a process that never asked
    assert guardian_warm("local") > 0
    assert set(local._MODELS) == set(Condition)

    # With a calibrated version active, what loads is the adapter its map sits on.
    guardian_model_activate(number=_local_version().number)
    monkeypatch.setattr(local, "_MODELS", {})
    assert guardian_warm("local") > 0
    assert set(local._MODELS) == set(Condition)
    assert guardian_warm("scripted") == 0.0  # a script's answers are in each run's config


def test_activation_leaves_exactly_one_active_version_per_adapter():
    first, second = _local_version(1), _local_version(2)
    other = GuardianModelVersion.objects.create(
        number=3,
        adapter="http",
        base_model_version=PIN,
        kind="recalibrated",
        calibration={},
        examples_digest="0" * 64,
    )
    guardian_model_activate(number=first.number)
    guardian_model_activate(number=other.number)
    guardian_model_activate(number=second.number)
    assert list(GuardianModelVersion.objects.filter(is_active=True).order_by("number")) == [
        second,
        other,
    ]
    assert guardian_model_version_active(adapter="local") == second
    # The database itself refuses a second active version of one adapter.
    with pytest.raises(IntegrityError), transaction.atomic():
        GuardianModelVersion.objects.filter(pk=first.pk).update(is_active=True)
    out = io.StringIO()
    call_command("activate_guardian_model", "1", stdout=out)
    assert "is active for local runs" in out.getvalue()
    assert guardian_model_version_active(adapter="local") == first
    with pytest.raises(CommandError, match="no guardian model version 9"):
        call_command("activate_guardian_model", "9")


def test_a_version_learnt_on_another_base_model_fails_closed():
    version = _local_version(base_model_version="local-0+000000000000")
    guardian = versioned_guardian(version, LocalGuardian(), deadline_seconds=2.0)
    answers = guardian.answer({"goal": "g", "last_results": ["hello"]}, [Condition.INTEGRITY])
    assert "learnt on local-0+000000000000" in answers["integrity"].reason


# ---- the local guardian, retrained ---------------------------------------------------------


def _taught(n: int, label: bool) -> dict:
    verb = "tally" if label else "count"
    return {
        "goal": "Summarise the warehouse notes",
        "last_results": [
            f"Note {n}: the quarterly zorblax ledger needs a {verb} of crate {n} before friday."
        ],
    }


@pytest.mark.xfail(
    strict=True,
    reason="known failure (issues 24, 25): integrity now reads meaning, not words, and 24 taught "
    "examples that differ by one word (tally / count) among thousands do not move it; the "
    "learning loop needs weighting or stacking to learn from few verdicts",
)
def test_train_local_guardian_makes_a_version_that_answers_what_it_was_taught():
    for n in range(24):
        LabelledExample.objects.create(
            condition="integrity",
            projection=_taught(n, True),
            label=True,
            source=ExampleSource.HUMAN,
            question_set_version="q",
            model_version="local",
        )
    for n in range(24, 30):
        LabelledExample.objects.create(
            condition="integrity",
            projection=_taught(n, False),
            label=False,
            source=ExampleSource.IMPORT,
            question_set_version="q",
            model_version="local",
        )
    out = io.StringIO()
    call_command("train_local_guardian", stdout=out)
    version = GuardianModelVersion.objects.get()
    assert version.kind == "retrained"
    assert not version.is_active
    assert version.model_version == f"{LocalGuardian().model_version}/train-1"
    assert "retrained, inactive" in out.getvalue()
    held = set(version.figures["integrity"]["held_out_ids"])
    assert held
    assert held.isdisjoint(version.example_ids)
    taught = LabelledExample.objects.filter(pk__in=version.example_ids, label=True).first()
    bundled = LocalGuardian()
    retrained = versioned_guardian(version, bundled, deadline_seconds=30.0)
    before = bundled.answer(taught.projection, [Condition.INTEGRITY])["integrity"]
    after = retrained.answer(taught.projection, [Condition.INTEGRITY])["integrity"]
    assert retrained.model_version == version.model_version
    assert after > before + 0.2
    # Another guardian of the same version answers the same (retrained once, cached).
    again = versioned_guardian(version, LocalGuardian(), deadline_seconds=30.0)
    assert again.answer(taught.projection, [Condition.INTEGRITY])["integrity"] == after
    # Conditions it was not taught are the bundled model's.
    stagnation = {"goal": "g", "history": [{"turn": 1, "summary": "read a"}]}
    assert retrained.answer(stagnation, [Condition.STAGNATION]) == bundled.answer(
        stagnation, [Condition.STAGNATION]
    )


def test_evaluate_scores_with_a_candidate_local_version_before_it_is_active(active_version):
    version = _local_version()
    lines = [
        json.dumps(
            {
                "condition": "integrity",
                "projection": {"goal": "Read mail", "last_results": ["Lunch at noon?"]},
                "label": False,
            }
        )
    ]
    plain = traces_evaluate(lines=lines, model="local")
    candidate = traces_evaluate(lines=lines, model="local", guardian_version=version.number)
    assert candidate["model_version"] == version.model_version
    p = plain["conditions"]["integrity"]["reliability"]
    q = candidate["conditions"]["integrity"]["reliability"]
    mean = next(b["mean_predicted"] for b in p if b["count"])
    assert next(b["mean_predicted"] for b in q if b["count"]) == approx(mean / 2, abs=1e-6)
    with pytest.raises(Exception, match="version 1 is a local guardian, not http"):
        traces_evaluate(lines=lines, model="http", guardian_version=version.number)
