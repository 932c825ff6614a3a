"""The auditors' pages of runs."""

from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.selectors import run_list


@permission_required("runs.audit_run", raise_exception=True)
def run_list_page(request: HttpRequest) -> HttpResponse:
    return render(request, "runs/run_list.html", {"runs": run_list()[:200]})
