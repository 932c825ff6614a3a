"""Project middleware: the friendly 404 page for a view's Http404, in DEBUG too; request metrics."""

import time
from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from guardian_core import metrics


class FriendlyNotFoundMiddleware:
    """A missing escalation or run is an everyday event for a reviewer following an old link,
    not a developer's bug: with DEBUG on (make demo) Django would answer with its debug page,
    listing the URL patterns. This answers with templates/404.html whatever DEBUG says.

    A URL that matches no pattern gets the same page: outside DEBUG Django renders 404.html
    itself; in DEBUG its debug page (which lists every URL pattern) is replaced here."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            settings.DEBUG
            and response.status_code == 404
            and getattr(request, "resolver_match", None) is None
        ):
            return render(request, "404.html", {"request_path": request.path}, status=404)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, Http404):
            return None
        return render(request, "404.html", {"request_path": request.path}, status=404)


_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}


class RequestMetricsMiddleware:
    """Count every request and its time by route (the URL pattern's name, never the path: a
    path holds ids, and each distinct label value is a series kept for good)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = (match.view_name if match is not None else "") or "unresolved"
        metrics.HTTP_SECONDS.labels(route).observe(time.perf_counter() - started)
        method = request.method if request.method in _METHODS else "other"
        metrics.HTTP_REQUESTS.labels(method, route, f"{response.status_code // 100}xx").inc()
        return response
