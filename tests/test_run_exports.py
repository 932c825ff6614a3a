"""Exports of the decision log from the pages and the API: a run as one JSON document, a run's
decisions as CSV, and every run's decisions under the runs list's filters as CSV, streamed by
keyset; the same bytes from a page, the API and the command; factories' decisions sealed."""

import csv
import io
import json
import re
from datetime import UTC, datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.http import StreamingHttpResponse

from guardian_core.services import api_token_create
from runs import audit
from runs.audit import run_chain_verify
from runs.chain import HASHED_FIELDS
from runs.presentation import decision_log_filename
from tests.factories import make_decision, make_escalation, make_run, make_turn

pytestmark = pytest.mark.django_db


def body(response) -> bytes:
    if isinstance(response, StreamingHttpResponse):
        return b"".join(response.streaming_content)
    return response.content


def rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def decided_run(turns: int, **run_fields):
    """A run with `turns` decided turns, sealed in chain order, and an escalation (its text has
    a comma, a quote and a line break, which CSV must quote)."""
    run = make_run(**run_fields)
    for index in range(turns):
        turn = make_turn(run=run, index=index)
        make_decision(
            turn=turn,
            reasons=[{"source": "integrity", "detail": 'said "stop",\nthen went on'}],
        )
        if index == turns - 1:
            make_escalation(turn=turn)
    return run


@pytest.fixture
def api(client, auditor):
    """A client that signs its requests with the auditor's token, as a machine would."""
    _, secret = api_token_create(user=auditor, name="exports")
    return lambda url: client.get(url, HTTP_AUTHORIZATION=f"Bearer {secret}")


def test_factory_decisions_are_sealed_and_chained_as_the_app_seals_them():
    run = decided_run(3)
    report = run_chain_verify(run)
    assert report.ok, report.describe()
    assert report.decisions == 3
    assert report.head != ""


def test_a_run_exports_as_the_same_json_document_from_the_page_the_api_and_the_command(
    client, auditor, api
):
    run = decided_run(2, goal="Refund «order» ord_1")
    client.force_login(auditor)
    page = client.get(f"/runs/{run.pk}/export.json")
    machine = api(f"/api/runs/{run.pk}/export/")
    out = StringIO()
    call_command("export_run", str(run.pk), stdout=out)

    assert page.status_code == machine.status_code == 200
    assert machine["Content-Type"] == page["Content-Type"] == "application/json; charset=utf-8"
    assert body(machine) == body(page)
    assert out.getvalue().rstrip("\n").encode() == body(page)
    document = json.loads(body(machine))
    assert document["run"]["goal"] == "Refund «order» ord_1"
    assert [t["decision"]["content_hash"] for t in document["turns"]][-1] == document["head_hash"]
    assert api("/api/runs/999999/export/").status_code == 404


def test_a_runs_decisions_are_the_same_csv_from_the_page_and_the_api(client, auditor, api):
    run = decided_run(3)
    decided_run(2)  # another run's decisions stay out
    client.force_login(auditor)
    page = client.get(f"/runs/{run.pk}/decisions.csv")
    machine = api(f"/api/runs/{run.pk}/decisions.csv")

    assert isinstance(machine, StreamingHttpResponse)
    assert machine["Content-Type"] == "text/csv; charset=utf-8"
    data = body(machine)
    assert data == body(page)
    listed = rows(data)
    assert [int(r["turn"]) for r in listed] == [0, 1, 2]
    assert {r["run_id"] for r in listed} == {str(run.pk)}
    assert listed[0]["prev_hash"] == ""
    assert [r["prev_hash"] for r in listed[1:]] == [r["content_hash"] for r in listed[:-1]]
    assert json.loads(listed[0]["reasons"])[0]["detail"] == 'said "stop",\nthen went on'
    assert list(listed[0]) == list(audit.CSV_COLUMNS)
    assert api("/api/runs/999999/decisions.csv").status_code == 404
    # One run's file keeps its own name; only the all-runs log is named by its time.
    expected = f'attachment; filename="run-{run.pk}-decisions.csv"'
    assert page["Content-Disposition"] == machine["Content-Disposition"] == expected


def test_the_all_runs_decision_log_is_named_by_the_second_it_was_made(settings):
    settings.TIME_ZONE = "Europe/Paris"
    made = datetime(2026, 2, 11, 23, 30, 5, tzinfo=UTC)

    assert decision_log_filename(made) == "decision-log-20260212-003005.csv"


def test_every_runs_decision_log_streams_by_keyset_run_by_run_in_chain_order(
    client, auditor, api, monkeypatch
):
    monkeypatch.setattr(audit, "CSV_BATCH", 2)  # many batches from a few decisions
    runs = [decided_run(n) for n in (3, 0, 4, 1)]
    client.force_login(auditor)
    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        page = client.get("/runs/decisions.csv")
        data = body(page)
    machine = api("/api/decisions.csv")

    assert isinstance(page, StreamingHttpResponse)
    # Named by when it was made, the same from the page and the API (the clock may tick).
    name = r'attachment; filename="decision-log-\d{8}-\d{6}\.csv"'
    assert re.fullmatch(name, page["Content-Disposition"])
    assert re.fullmatch(name, machine["Content-Disposition"])
    assert body(machine) == data
    listed = rows(data)
    expected = [(run.pk, index) for run in runs for index in range(run.turns.count())]
    assert [(int(r["run_id"]), int(r["turn"])) for r in listed] == expected
    # 8 decisions, 2 a query: 5 reads of the log (the last one finds the end), no OFFSET.
    reads = [sql for sql in statements if 'FROM "runs_decision"' in sql]
    assert len(reads) == 5
    assert not any("OFFSET" in sql for sql in reads)


@pytest.mark.parametrize(
    ("query", "kept"),
    [
        ("status=succeeded", {"done"}),
        ("escalated=no", {"plain"}),
        ("q=refund", {"done"}),
        ("tool=", {"done", "plain"}),
    ],
)
def test_the_decision_log_export_takes_the_runs_lists_filters(client, auditor, api, query, kept):
    named = {
        "done": decided_run(2, goal="Refund it", status="succeeded", final_answer="ok"),
        "plain": make_run(goal="Look it up"),
    }
    make_decision(turn=make_turn(run=named["plain"]))
    client.force_login(auditor)
    page = body(client.get(f"/runs/decisions.csv?{query}"))
    machine = body(api(f"/api/decisions.csv?{query}"))
    assert page == machine
    assert {int(r["run_id"]) for r in rows(page)} == {named[name].pk for name in kept}


@pytest.mark.parametrize(("field", "value"), [("status", "done"), ("since", "yesterday")])
def test_a_bad_filter_on_the_decision_log_export_is_a_400_naming_it(
    client, auditor, api, field, value
):
    decided_run(1)
    client.force_login(auditor)
    page = client.get(f"/runs/decisions.csv?{field}={value}")
    assert page.status_code == 400
    assert page.content.decode().startswith(f"{field}:")
    machine = api(f"/api/decisions.csv?{field}={value}")
    assert machine.status_code == 400
    assert set(machine.json()) == {field}
    assert api("/api/decisions.csv?after=abc&offset=3").json().keys() == {"after", "offset"}


def test_the_runs_page_links_to_the_decision_log_of_the_runs_its_filters_match(client, auditor):
    decided_run(1)
    client.force_login(auditor)
    page = client.get("/runs/").content.decode()
    assert 'href="/runs/decisions.csv" download' in page
    filtered = client.get("/runs/?status=running&q=a%26b", HTTP_HX_REQUEST="true")
    link = re.search(r'href="(/runs/decisions\.csv[^"]*)" download', filtered.content.decode())
    assert link.group(1) == "/runs/decisions.csv?status=running&amp;q=a%26b"
    # With a bad filter the export would hold more runs than asked for: no link then.
    assert "decisions.csv" not in client.get("/runs/?status=done").content.decode()


def test_the_csv_holds_every_hashed_column_of_each_decision(client, auditor):
    run = decided_run(1)
    decision = run.turns.get().decision
    client.force_login(auditor)
    (row,) = rows(body(client.get(f"/runs/{run.pk}/decisions.csv")))
    assert row["run_uid"] == str(run.uid)
    assert row["policy_version"] == str(run.policy_version.number)
    for name in HASHED_FIELDS:
        value = getattr(decision, name)
        assert (row[name] if isinstance(value, str) else json.loads(row[name])) == value
