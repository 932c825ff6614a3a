"""The reviewers' pages: the escalation queue."""

from django.contrib.auth.decorators import permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from escalations.selectors import escalation_list_open


@permission_required("escalations.review_escalation", raise_exception=True)
def escalation_queue_page(request: HttpRequest) -> HttpResponse:
    return render(
        request, "escalations/escalation_queue.html", {"escalations": escalation_list_open()}
    )
