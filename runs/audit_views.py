"""The auditors' views of the tamper-evident log: verify a run's chain, export it."""

from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runs.audit import decision_csv_lines, run_chain_verify, run_export_text
from runs.models import Run
from runs.presentation import decision_log_filename
from runs.selectors import run_filters_from


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
    response = HttpResponse(run_export_text(run), content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.json"'
    return response


@permission_required("runs.audit_run", raise_exception=True)
@require_GET
def run_export_csv(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's decision log as CSV, one row a decision with its hashes, streamed."""
    run = _run(run_id)
    response = StreamingHttpResponse(
        decision_csv_lines(run_id=run.pk), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-decisions.csv"'
    return response


@permission_required("runs.audit_run", raise_exception=True)
@require_GET
def decision_log_csv(request: HttpRequest) -> HttpResponse:
    """The decision log of every run the runs list's filters match (the runs page links here
    with its filters), as CSV, streamed. A bad filter is a 400 naming it: an export must not
    quietly hold more runs than the auditor asked for."""
    filters, problems = run_filters_from(request.GET)
    if problems:
        return HttpResponse(
            "\n".join(problems) + "\n", status=400, content_type="text/plain; charset=utf-8"
        )
    response = StreamingHttpResponse(
        decision_csv_lines(filters=filters), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{decision_log_filename()}"'
    return response
