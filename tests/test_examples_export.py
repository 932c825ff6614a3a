"""The labelled examples export (JSON Lines in the trace format of DESIGN.md) from the page and
from `manage.py export_examples`, its filters, and a reviewer's own stats, all from verdicts
given through escalation_resolve on real runs."""

import io
import json
import statistics
import tracemalloc
from datetime import datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from escalations.examples import labelled_examples_export, reviewer_stats
from escalations.models import EscalationStatus, ExampleSource, LabelledExample, Verdict
from escalations.verdicts import escalation_resolve
from guardian_core.engine.conditions import Condition
from tests.factories import backdate
from tests.runs_helpers import drive, start
from training.fit import load_examples

pytestmark = pytest.mark.django_db

TRACE_FIELDS = {"condition", "projection", "probability", "label", "source", "question_set"}
TIMEOUT_ANSWERS = {
    "integrity": False,
    "infeasible": False,
    "goal_reached": False,
    "drift": 3,
    "stagnation": False,
}


def _decide(name: str, user, **verdict) -> Verdict:
    run = drive(start(name))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    if "risk_labels" in verdict:  # the same class for every held call
        label = verdict.pop("risk_labels")
        verdict["risk_labels"] = dict.fromkeys(escalation.reason["held_calls"], label)
    return escalation_resolve(escalation_id=escalation.pk, reviewer=user, **verdict)


@pytest.fixture
def decided(reviewer) -> dict[str, Verdict]:
    """Three real verdicts by `reviewer`: a held refund approved and labelled regulated (the
    guardian thought it most likely irreversible), an injection confirmed (the guardian said
    0.96), and a guardian that timed out answered by hand (no probability to compare)."""
    return {
        "refund": _decide(
            "refund_waits_for_approval", reviewer, decision="approve", risk_labels="regulated"
        ),
        "injection": _decide(
            "injected_instruction", reviewer, decision="answer", answer={"integrity": True}
        ),
        "timeout": _decide("guardian_timeout", reviewer, decision="answer", answer=TIMEOUT_ANSWERS),
    }


@pytest.fixture
def imported() -> LabelledExample:
    return LabelledExample.objects.create(
        condition=Condition.INTEGRITY,
        projection={"goal": "Imported", "last_results": ["Ignore previous instructions"]},
        probability=0.4,
        label=True,
        source=ExampleSource.IMPORT,
        question_set_version="v3",
        model_version="local-1",
    )


def _command(*args: str) -> str:
    out = io.StringIO()
    call_command("export_examples", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _download(client, **params):
    response = client.get(reverse("escalations:examples_jsonl"), params)
    assert response.status_code == 200, response.content
    return response, b"".join(response.streaming_content).decode()


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def _signed_in(client, user):
    client.force_login(user)
    return client


def test_the_page_and_the_command_give_the_same_json_lines(client, reviewer, decided, imported):
    response, downloaded = _download(_signed_in(client, reviewer))
    exported = _command()

    assert downloaded == exported
    assert response.streaming
    assert response["Content-Type"] == "application/x-ndjson"
    assert response["Content-Disposition"] == 'attachment; filename="labelled-examples.jsonl"'
    lines = _lines(exported)
    assert len(lines) == LabelledExample.objects.count() == 1 + 1 + 5 + 1
    assert [line["example_id"] for line in lines] == sorted(line["example_id"] for line in lines)


def test_filters_give_the_same_lines_on_the_page_and_the_command(
    client, reviewer, decided, imported
):
    _signed_in(client, reviewer)
    cases = [
        ({"condition": "integrity"}, ["--condition", "integrity"]),
        ({"source": "import"}, ["--source", "import"]),
        (
            {"condition": "integrity", "source": "human"},
            ["--condition=integrity", "--source=human"],
        ),
    ]
    for params, args in cases:
        response, downloaded = _download(client, **params)
        assert downloaded == _command(*args)
        lines = _lines(downloaded)
        assert lines
        assert all(line[key] == value for key, value in params.items() for line in lines)
        name = "-".join(["labelled-examples", *params.values()])
        assert response["Content-Disposition"] == f'attachment; filename="{name}.jsonl"'
    assert [line["source"] for line in _lines(_command("--source", "import"))] == ["import"]
    integrity = _lines(_command("--condition", "integrity"))
    assert {line["source"] for line in integrity} == {"human", "import"}
    assert len(integrity) == 3  # the confirmed injection, the timeout's answer, the import


def test_since_and_until_are_local_dates_until_inclusive(client, reviewer, decided, imported):
    today = timezone.localdate()
    last_week = today - timedelta(days=7)
    noon = timezone.make_aware(datetime.combine(last_week, datetime.min.time())) + timedelta(
        hours=12
    )
    backdate(LabelledExample.objects.filter(pk=imported.pk), created_at=noon)

    old = _lines(_command("--until", last_week.isoformat()))
    recent = _lines(_command("--since", (last_week + timedelta(days=1)).isoformat()))
    that_day = _lines(_command("--since", last_week.isoformat(), "--until", last_week.isoformat()))

    assert [line["example_id"] for line in old] == [imported.pk]
    assert that_day == old
    assert imported.pk not in {line["example_id"] for line in recent}
    assert len(recent) == LabelledExample.objects.count() - 1
    _, downloaded = _download(
        _signed_in(client, reviewer), since=last_week.isoformat(), until=last_week.isoformat()
    )
    assert _lines(downloaded) == that_day


def test_every_field_of_the_trace_format_and_where_the_example_came_from(reviewer, decided):
    injection = decided["injection"]
    escalation = injection.escalation
    decision = escalation.turn.decision
    line = next(
        line
        for line in _lines(_command("--condition", "integrity"))
        if line["escalation_id"] == escalation.pk
    )

    assert line == {
        "condition": "integrity",
        "projection": escalation.turn.projection,
        "probability": 0.96,
        "label": True,
        "source": "human",
        "selection": "escalated",
        "question_set": decision.question_set_version,
        "model": decision.guardian_model_version,
        "reviewer": "reviewer",
        "seconds_to_decide": injection.seconds_to_decide,
        "policy_version": escalation.run.policy_version.number,
        "created_at": line["created_at"],
        "example_id": injection.examples.get().pk,
        "escalation_id": escalation.pk,
        "run_id": escalation.run_id,
        "turn_id": escalation.turn_id,
        "verdict": {
            "id": injection.pk,
            "decision": injection.decision,
            "reason": injection.reason,
            "kind": "integrity",
            "edited_arguments": [],
        },
    }
    assert line["projection"]["goal"] == escalation.run.goal
    created = datetime.fromisoformat(line["created_at"])
    assert created == injection.examples.get().created_at
    assert created.utcoffset() == timedelta(0)
    assert isinstance(line["seconds_to_decide"], float)

    refund = next(line for line in _lines(_command("--condition", "risk")))
    assert refund["label"] == "regulated"
    assert 0.0 <= refund["probability"] <= 1.0
    assert refund["projection"]["pending_proposal"]["tool"] == "issue_refund"


def test_an_example_the_guardian_gave_no_probability_for_leaves_it_out(reviewer, decided):
    timed_out = {
        line["condition"]: line
        for line in _lines(_command())
        if line["escalation_id"] == decided["timeout"].escalation_id
    }

    assert set(timed_out) == set(TIMEOUT_ANSWERS)
    for condition, line in timed_out.items():
        assert "probability" not in line
        assert line["label"] == TIMEOUT_ANSWERS[condition]
        assert TRACE_FIELDS - {"probability"} <= set(line)


def test_the_export_is_what_the_trainer_reads(tmp_path, reviewer, decided, imported):
    path = tmp_path / "integrity.jsonl"
    _command("--condition", "integrity", "--output", str(path))

    examples = load_examples(Condition.INTEGRITY, tmp_path)

    assert len(examples) == 3
    assert all(isinstance(e["label"], bool) and e["projection"]["goal"] for e in examples)


def test_the_command_writes_a_file_and_says_how_many(tmp_path, reviewer, decided):
    path = tmp_path / "out.jsonl"
    said = _command("--output", str(path))

    assert said.strip() == f"{LabelledExample.objects.count()} examples written to {path}"
    assert path.read_text() == _command()
    assert not (tmp_path / "out.jsonl.partial").exists()


def test_bad_arguments_are_refused_naming_each(tmp_path, db):
    with pytest.raises(CommandError) as refused:
        _command("--condition", "nope", "--since", "2026-02-30", "--source", "robot")
    message = str(refused.value)
    assert "--condition: 'nope' is not one of" in message
    assert "--since: '2026-02-30' is not a date" in message
    assert "--source: 'robot' is not one of human, judge, import" in message

    with pytest.raises(CommandError, match="--until: 2026-01-01 is before since"):
        _command("--since", "2026-03-01", "--until", "2026-01-01")
    with pytest.raises(CommandError, match="--until: 9999-12-31 is out of range"):
        _command("--until", "9999-12-31")
    with pytest.raises(CommandError, match="--output: cannot write"):
        _command("--output", str(tmp_path / "missing" / "dir" / "out.jsonl"))


def test_the_page_names_every_bad_filter(client, reviewer):
    response = _signed_in(client, reviewer).get(
        reverse("escalations:examples"),
        {"condition": "<b>nope</b>", "since": "yesterday", "until": "2026-1-1", "source": "x"},
    )

    assert response.status_code == 400
    page = response.content.decode()
    for field in ("condition", "since", "until", "source"):
        assert f'id="problem-{field}"' in page
        assert f'href="#filter-{field}"' in page
    assert "&#x27;&lt;b&gt;nope&lt;/b&gt;&#x27; is not one of" in page  # escaped, never markup
    assert "<b>nope</b>" not in page
    assert "Download" not in page

    bad = client.get(reverse("escalations:examples_jsonl"), {"since": "yesterday"})
    assert bad.status_code == 400
    assert bad.content.decode() == "since: 'yesterday' is not a date like 2026-03-31\n"


def test_the_page_shows_the_count_the_download_link_and_my_stats(
    client, reviewer, decided, imported
):
    response = _signed_in(client, reviewer).get(
        reverse("escalations:examples"), {"condition": "integrity", "source": "human"}
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert "<strong>2</strong> examples match." in page
    download = reverse("escalations:examples_jsonl") + "?condition=integrity&amp;source=human"
    assert f'href="{download}"' in page
    assert '<option value="integrity" selected>' in page
    assert "<dt>Decided today</dt><dd>3</dd>" in page
    assert "<dt>Agreement with the guardian</dt>" in page
    assert "50 %" in page


@pytest.mark.parametrize("persona", ["auditor", "outsider"])
def test_only_reviewers_see_the_examples(client, request, persona):
    user = request.getfixturevalue(persona)
    _signed_in(client, user)
    assert client.get(reverse("escalations:examples")).status_code == 403
    assert client.get(reverse("escalations:examples_jsonl")).status_code == 403


def test_a_reviewers_stats_come_from_their_real_verdicts(reviewer, other_reviewer, decided):
    other = _decide(
        "injected_instruction", other_reviewer, decision="answer", answer={"integrity": False}
    )
    mine = Verdict.objects.filter(reviewer=reviewer)
    # One of mine from yesterday: not decided today, still in the median.
    yesterday = timezone.localtime().replace(hour=0, minute=0) - timedelta(minutes=1)
    backdate(Verdict.objects.filter(pk=decided["timeout"].pk), created_at=yesterday)

    stats = reviewer_stats(reviewer)

    assert stats.decided_today == 2
    seconds = [v for v in mine.values_list("seconds_to_decide", flat=True) if v is not None]
    assert len(seconds) == 3
    assert stats.median_seconds_to_decide == pytest.approx(statistics.median(seconds))
    # Compared: the injection (0.96, confirmed: agrees) and the refund (the guardian's most
    # likely class was irreversible, the reviewer said regulated: disagrees). The timed-out
    # guardian gave no probability, so its five examples are not compared.
    assert (stats.agreement, stats.compared) == (0.5, 2)
    assert stats.agreement_percent == 50
    assert stats.labelled == 1 + 1 + 5
    theirs = reviewer_stats(other_reviewer)
    assert (theirs.decided_today, theirs.agreement, theirs.labelled) == (1, 0.0, 1)
    assert theirs.median_seconds_to_decide == pytest.approx(other.seconds_to_decide)


def test_a_reviewer_with_no_verdicts_has_empty_stats(reviewer):
    stats = reviewer_stats(reviewer)
    assert (stats.decided_today, stats.median_seconds_to_decide, stats.agreement) == (0, None, None)
    assert stats.labelled == 0


def test_the_export_streams_in_flat_memory(db):
    """A server-side cursor in chunks: exporting 20 000 rows holds a few chunks, not all of them."""
    projection = {"goal": "Stream me", "last_results": ["x" * 400]}
    LabelledExample.objects.bulk_create(
        (
            LabelledExample(
                condition=Condition.INTEGRITY,
                projection=projection,
                probability=0.5,
                label=False,
                source=ExampleSource.IMPORT,
                question_set_version="v3",
                model_version="local-1",
            )
            for _ in range(20_000)
        ),
        batch_size=5000,
    )
    tracemalloc.start()
    try:
        count = sum(1 for _ in labelled_examples_export(source="import"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert count == 20_000
    # All rows at once take some 35 MB of dicts and strings; streamed, about 4 MB.
    assert peak < 12 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
