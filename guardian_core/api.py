"""The API's shared parts: the permission check, the one error body, the exception handler,
Django's 400/500 answers under /api/, the index of endpoints and the JSON 404. Each room's
endpoints are in its own api.py, named in its api_urls.py."""

import logging
import sys

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import RequestDataTooBig
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import defaults
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, set_rollback
from rest_framework.views import exception_handler as drf_exception_handler

from guardian_core.db import conflict_code, database_unavailable

logger = logging.getLogger(__name__)


# How long a client should wait before trying again while the database does not answer.
DATABASE_RETRY_AFTER_SECONDS = 30


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF's handler, with every error body in the API's one shape (error_body), plus: a
    transaction that lost a race even after its retries (see guardian_core.db.retry_on_conflict)
    is a 409 the caller may retry, never a 500; a body over DATA_UPLOAD_MAX_MEMORY_SIZE is a
    413 (Django's own answer is an HTML 400 page); a database that does not answer is a 503
    with Retry-After (Django's is an HTML 500 page). The HTML pages keep Django's answers."""
    if isinstance(exc, OperationalError) and conflict_code(exc):
        return Response(
            error_body(_("Another change to this run happened at the same time; try again.")),
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, RequestDataTooBig):
        return Response(_too_big_body(), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if database_unavailable(exc):
        logger.warning("the database does not answer: %s", exc)
        set_rollback()
        return _database_down_response(Response)
    response = drf_exception_handler(exc, context)
    if response is not None:
        response.data = error_body(response.data)
    return response


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: under /api/, what the API answers everywhere (a body over the upload limit
    a 413, anything else a 400), as JSON in its error shape; the pages keep Django's page.
    Reached only from outside an API view (a bad Host header): inside one, exception_handler
    answers first."""
    if not _under_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse(_too_big_body(), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    return JsonResponse(error_body(_("Bad request.")), status=status.HTTP_400_BAD_REQUEST)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: under /api/, a JSON 503 with Retry-After when the database does not answer
    and a JSON 500 otherwise; the pages keep templates/500.html. Django calls it while the
    exception is being handled, so sys.exc_info() names it."""
    if not _under_api(request):
        return defaults.server_error(request)
    if database_unavailable(sys.exc_info()[1]):
        return _database_down_response(JsonResponse)
    body = error_body(_("A server error occurred; it has been logged."))
    return JsonResponse(body, status=status.HTTP_500_INTERNAL_SERVER_ERROR)


def _under_api(request: HttpRequest) -> bool:
    return request.path == "/api" or request.path.startswith("/api/")


def _too_big_body() -> dict[str, list[str]]:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return error_body(
        _(
            "The request body is larger than the %(limit)s bytes this server takes "
            "(DATA_UPLOAD_MAX_MEMORY_SIZE); send less."
        )
        % {"limit": limit}
    )


def _database_down_response(response_class):
    response = response_class(
        error_body(_("The database is not answering; try again in a moment.")),
        status=status.HTTP_503_SERVICE_UNAVAILABLE,
    )
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


def error_body(data: object) -> dict[str, list[str]]:
    """The API's one error shape: a JSON object mapping each bad input field to a list of
    messages, and "detail" to the messages about the request as a whole (not found, not
    allowed, already decided…). A nested field's messages keep their path ("budgets.max_turns:
    …", "tools.0: …") under the top-level field, so a client reads every error the same way."""
    if isinstance(data, dict):
        body: dict[str, list[str]] = {}
        for key, value in data.items():
            name = "detail" if key in ("non_field_errors", "detail") else str(key)
            nested = isinstance(value, dict)
            body.setdefault(name, []).extend(_messages(value, name if nested else ""))
        return body
    return {"detail": _messages(data, "")}


def _messages(value: object, path: str) -> list[str]:
    if isinstance(value, dict):
        return [
            message
            for key, inner in value.items()
            for message in _messages(inner, _nested(path, str(key)))
        ]
    if isinstance(value, list | tuple):
        return [message for item in value for message in _messages(item, path)]
    return [f"{path}: {value}" if path else str(value)]


def _nested(path: str, key: str) -> str:
    # A nested object's own errors (not one of its fields') are about the object itself:
    # "calls.0: …", not "calls.0.non_field_errors: …".
    if key == "non_field_errors" and path:
        return path
    return f"{path}.{key}" if path else key


def api_view(view_class):
    """An API view as a URL pattern's view: API clients get 403 JSON from DRF rather than a
    redirect to the HTML login page."""
    return login_not_required(view_class.as_view())


class HasRequiredPermission(BasePermission):
    """Allows a signed-in user holding the view's `required_permission`, nobody else.

    DRF's DjangoModelPermissions lets any signed-in user read; Guardian's screens are per role,
    so the API checks the same permission as the matching page.
    """

    def has_permission(self, request: Request, view) -> bool:
        method = request.method.lower()
        if method not in view.http_method_names or not hasattr(view, method):
            # DRF checks permissions before it looks for the method's handler, so a method the
            # endpoint does not have (POST /api/runs/) was answered 403, as if the caller
            # lacked a right. There is nothing here to guard: let DRF answer 405 with Allow.
            return True
        user = request.user
        return bool(user and user.is_authenticated and user.has_perm(view.required_permission))


# ---- /api/: what there is -------------------------------------------------------------------

# (url name, method, path, what it does): the index. A test resolves each path to its name.
API_ENDPOINTS = (
    ("schema", "GET", "/api/schema/", gettext_lazy("The OpenAPI 3 schema of this API.")),
    ("docs", "GET", "/api/docs/", gettext_lazy("The schema as a browsable page (Swagger UI).")),
    ("run-list", "GET", "/api/runs/",
     gettext_lazy("Runs, newest first, by keyset pages (follow `next`); the runs page's "
                  "filters: status, outcome, stop_reason, since, until, policy, model, escalated, "
                  "tool, q.")),
    ("run-start", "POST", "/api/runs/start/", gettext_lazy("Start a run.")),
    ("run-detail", "GET", "/api/runs/{id}/", gettext_lazy("One run with its latest turns.")),
    ("run-cancel", "POST", "/api/runs/{id}/cancel/", gettext_lazy("Cancel a run.")),
    ("run-steps", "GET", "/api/runs/{id}/steps/",
     gettext_lazy("An external run: where it stands (the next step, one waiting for results, an "
                  "escalation).")),
    ("run-steps", "POST", "/api/runs/{id}/steps/",
     gettext_lazy("An external run: propose its next step; every call validated, the whole step "
                  "gated.")),
    ("run-step", "GET", "/api/runs/{id}/steps/{step}/",
     gettext_lazy("An external run's step as recorded.")),
    ("run-step-results", "POST", "/api/runs/{id}/steps/{step}/results/",
     gettext_lazy("An external run: report a step's results; Guardian decides it.")),
    ("run-turn-list", "GET", "/api/runs/{id}/turns/",
     gettext_lazy("A run's turns, a page at a time.")),
    ("run-turn-detail", "GET", "/api/runs/{id}/turns/{index}/",
     gettext_lazy("One turn: its calls, decision and escalations.")),
    ("run-export", "GET", "/api/runs/{id}/export/",
     gettext_lazy("A run as one JSON document (the run page's export; manage.py import_run reads "
                  "it).")),
    ("run-decisions-csv", "GET", "/api/runs/{id}/decisions.csv",
     gettext_lazy("A run's decision log as CSV, in chain order.")),
    ("decision-log-csv", "GET", "/api/decisions.csv",
     gettext_lazy("The decision log of every run the runs filters match, as CSV, streamed.")),
    ("escalation-list", "GET", "/api/escalations/",
     gettext_lazy("Open escalations, the nearest deadline first.")),
    ("escalation-detail", "GET", "/api/escalations/{id}/",
     gettext_lazy("One escalation, its held calls and the hash to approve each by.")),
    ("escalation-claim", "POST", "/api/escalations/{id}/claim/",
     gettext_lazy("Claim an escalation.")),
    ("escalation-wait", "GET", "/api/escalations/{id}/wait",
     gettext_lazy("An external run's escalation: its verdict as soon as there is one (long poll, "
                  "≤ 30 s).")),
    ("escalation-release", "POST", "/api/escalations/{id}/release/",
     gettext_lazy("Release or skip an escalation.")),
    ("escalation-resolve", "POST", "/api/escalations/{id}/resolve/",
     gettext_lazy("Approve, reject or answer an escalation.")),
    ("escalation-extend", "POST", "/api/escalations/{id}/extend/",
     gettext_lazy("Extend an escalation's deadline, once.")),
    ("example-list", "GET", "/api/examples/",
     gettext_lazy("Labelled examples, newest first; filters: condition, source, since, until.")),
    ("example-export", "GET", "/api/examples/export/",
     gettext_lazy("Labelled examples as JSON Lines (the trace format), streamed.")),
    ("policy-version-list", "GET", "/api/policy-versions/",
     gettext_lazy("Policy versions, newest first.")),
    ("policy-version-create", "POST", "/api/policy-versions/create/",
     gettext_lazy("Create a policy version (a draft; with activate=true, through the regression "
                  "gate).")),
    ("policy-version-activate", "POST", "/api/policy-versions/{id}/activate/",
     gettext_lazy("Activate a policy version.")),
)  # fmt: skip


class ApiIndexOutputSerializer(serializers.Serializer):
    class EndpointSerializer(serializers.Serializer):
        name = serializers.CharField()
        method = serializers.CharField()
        path = serializers.CharField()
        description = serializers.CharField()

    endpoints = EndpointSerializer(many=True)
    authentication = serializers.CharField()
    errors = serializers.CharField()


class ApiIndexApi(APIView):
    """What this API offers, how to authenticate, and the shape of its errors."""

    permission_classes = [AllowAny]

    @extend_schema(responses={200: ApiIndexOutputSerializer})
    def get(self, request: Request) -> Response:
        endpoints = [
            {"name": name, "method": method, "path": path, "description": description}
            for name, method, path, description in API_ENDPOINTS
        ]
        return Response(
            {
                "endpoints": endpoints,
                "authentication": _(
                    "`Authorization: Bearer <token>` (an admin creates tokens in "
                    "the Django admin; each is shown once), or the browser's session."
                ),
                "errors": _(
                    'Every error is a JSON object mapping each bad field, or "detail" for '
                    "the request as a whole, to a list of messages."
                ),
            }
        )


class ApiNotFoundApi(APIView):
    """Any other path under /api/: a 404 in the API's error shape (not the HTML page), naming
    where the endpoints are listed."""

    permission_classes = [AllowAny]

    @extend_schema(exclude=True)
    def get(self, request: Request, rest: str) -> Response:
        message = _("No API endpoint at /api/%(rest)s; GET /api/ lists them.") % {"rest": rest}
        raise NotFound(message)

    post = put = patch = delete = get
