"""The auditors' views of the tamper-evident log: verify a run's chain, export it."""

import json

from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs.audit import decisions_csv, decisions_for_csv, run_chain_verify, run_export
from runs.models import Run


def _run(run_id: int, *related: str) -> Run:
    runs = Run.objects.filter(pk=run_id)
    run = (runs.select_related(*related) if related else runs).first()
    if run is None:
        raise Http404("No such run")
    return run


@permission_required("runs.audit_run", raise_exception=True)
@require_GET
def run_verify(request: HttpRequest, run_id: int) -> HttpResponse:
    """The chain check of one run, as the fragment the run page's "Verify chain" swaps in."""
    report = run_chain_verify(_run(run_id))
    return render(request, "runs/_run_actions.html#chain-report", {"report": report})


@permission_required("runs.audit_run", raise_exception=True)
@require_GET
def run_export_json(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run as one JSON document (manage.py import_run reads it back)."""
    run = _run(run_id, "policy_version", "created_by")
    response = HttpResponse(
        json.dumps(run_export(run), ensure_ascii=False, indent=1),
        content_type="application/json; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.json"'
    return response


@permission_required("runs.audit_run", raise_exception=True)
@require_GET
def run_export_csv(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's decision log as CSV, one row a decision with its hashes."""
    run = _run(run_id)
    response = HttpResponse(
        decisions_csv(decisions_for_csv(run)), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-decisions.csv"'
    return response
