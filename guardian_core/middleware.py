"""Project middleware: the friendly 404 page for a view's Http404, in DEBUG too."""

from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render


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
