"""The API's shared parts (permission check, error body, exception handler), its index, and
the policy version endpoints."""

import logging
import sys
from collections.abc import Mapping

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.generics import ListAPIView
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, set_rollback
from rest_framework.views import exception_handler as drf_exception_handler

from guardian_core.db import conflict_code, database_unavailable
from guardian_core.models import PolicyVersion, problems_by_field
from guardian_core.policy_gate import gate_report
from guardian_core.policy_validation import policy_version_problems
from guardian_core.selectors import policy_version_list
from guardian_core.services import (
    GateRefused,
    policy_version_activate,
    policy_version_create,
    policy_version_unregistered_problems,
)
from runs.validation import _json_problems

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
            error_body("Another change to this run happened at the same time; try again."),
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
    return JsonResponse(error_body("Bad request."), status=status.HTTP_400_BAD_REQUEST)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: under /api/, a JSON 503 with Retry-After when the database does not answer
    and a JSON 500 otherwise; the pages keep templates/500.html. Django calls it while the
    exception is being handled, so sys.exc_info() names it."""
    if not _under_api(request):
        return defaults.server_error(request)
    if database_unavailable(sys.exc_info()[1]):
        return _database_down_response(JsonResponse)
    body = error_body("A server error occurred; it has been logged.")
    return JsonResponse(body, status=status.HTTP_500_INTERNAL_SERVER_ERROR)


def _under_api(request: HttpRequest) -> bool:
    return request.path == "/api" or request.path.startswith("/api/")


def _too_big_body() -> dict[str, list[str]]:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return error_body(
        f"The request body is larger than the {limit} bytes this server takes "
        "(DATA_UPLOAD_MAX_MEMORY_SIZE); send less."
    )


def _database_down_response(response_class):
    response = response_class(
        error_body("The database is not answering; try again in a moment."),
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
            for message in _messages(inner, f"{path}.{key}" if path else str(key))
        ]
    if isinstance(value, list | tuple):
        return [message for item in value for message in _messages(item, path)]
    return [f"{path}: {value}" if path else str(value)]


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


class PolicyVersionOutputSerializer(serializers.ModelSerializer):
    run_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = PolicyVersion
        fields = [
            "id",
            "number",
            "label",
            "question_set_version",
            "thresholds",
            "question_set",
            "judge",
            "limits",
            "copied_from",
            "is_active",
            "run_count",
            "created_at",
        ]


class PolicyVersionListApi(ListAPIView):
    """Every policy version, newest first."""

    permission_classes = [HasRequiredPermission]
    required_permission = "guardian_core.manage_policy"
    serializer_class = PolicyVersionOutputSerializer

    def get_queryset(self):
        return policy_version_list()


def storable_json(field: str):
    """A validator: `field`'s JSON within the depth and size bounds, with no text PostgreSQL
    cannot store (NUL, lone surrogates): either would be a 500 at the insert."""

    def check(value: object) -> None:
        problems = _json_problems(field, value, default={})
        if problems:
            raise serializers.ValidationError(problems)

    return check


class PolicyVersionCreateInputSerializer(serializers.Serializer):
    label = serializers.CharField(allow_blank=True, default="", max_length=120)
    question_set_version = serializers.CharField(max_length=40)
    thresholds = serializers.DictField(
        validators=[storable_json("thresholds")],
        help_text="Per condition: c_stop, c_cont, delta (t* is computed from the costs), ...",
    )
    question_set = serializers.DictField(
        validators=[storable_json("question_set")],
        help_text="Per condition: the typed question asked.",
    )
    quorum = serializers.DictField(
        required=False,
        validators=[storable_json("quorum")],
        help_text='Two distinct approvers for some held calls: {"regulated": true, "tools": [..]}.',
    )
    judge = serializers.DictField(
        required=False,
        validators=[storable_json("judge")],
        help_text=(
            'A second-tier judge on the uncertain band: {"adapter": "openai", "model": "…", '
            '"conditions": ["goal_reached", …], "timeout_seconds": 10}; none when absent.'
        ),
    )
    limits = serializers.DictField(
        required=False,
        validators=[storable_json("limits")],
        help_text=(
            "Whole numbers: drift_window, drift_required, stagnation_window, "
            "stagnation_required (each replanning condition's hysteresis; left out: the run-wide "
            "hysteresis_window, hysteresis_required, default 3 and 2), max_replans, "
            "repeat_limit (left out: 2, 3), and the caps a run "
            "that states no budget of its own takes: max_turns, max_tokens, max_cost, "
            "max_wall_seconds, plus escalation_hours (left out: GUARDIAN_ESCALATION_HOURS)."
        ),
    )
    copied_from = serializers.PrimaryKeyRelatedField(
        queryset=PolicyVersion.objects.all(),
        required=False,
        allow_null=True,
        help_text=(
            "The id of the version this one is edited from: recorded, and a question reworded "
            "from it needs a new question_set_version."
        ),
    )
    activate = serializers.BooleanField(
        default=False,
        help_text=(
            "Activate it at once, through the regression gate: refused (and nothing stored) "
            "without override_reason when the gate refuses."
        ),
    )
    comment = serializers.CharField(
        required=False,
        default="created and activated through the API",
        help_text="With activate: why; recorded in the activation history.",
    )
    override_reason = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        help_text="With activate: why go ahead when the regression gate refuses.",
    )


def _policy_problems(error: DjangoValidationError) -> ValidationError:
    if hasattr(error, "error_dict"):
        return ValidationError(
            {
                ("detail" if field == "__all__" else field): messages
                for field, messages in error.message_dict.items()
            }
        )
    return ValidationError({"detail": error.messages})


def _with_content_problems(errors: dict, data: object) -> dict:
    """The serializer's errors plus the content rules' problems on the fields it let through,
    so one 400 names every bad field (a missing question_set_version must not hide bad
    thresholds until it is fixed)."""
    errors = {field: list(messages) for field, messages in errors.items()}
    if not isinstance(data, Mapping):
        return errors
    problems = policy_version_problems(
        thresholds=data.get("thresholds"),
        question_set=data.get("question_set"),
        question_set_version=data.get("question_set_version"),
        quorum=data.get("quorum"),
        judge=data.get("judge"),
        limits=data.get("limits"),
    )
    problems += policy_version_unregistered_problems(
        quorum=data.get("quorum"), judge=data.get("judge")
    )
    for field, messages in problems_by_field(problems).items():
        if field not in errors:
            errors[field] = messages
    return errors


class PolicyVersionCreateApi(APIView):
    """A new policy version, validated in full (every problem named at once); optionally made
    the active one at once, through the regression gate like every activation (all or nothing:
    a refused activation stores no version)."""

    permission_classes = [HasRequiredPermission]
    required_permission = "guardian_core.add_policyversion"

    @extend_schema(
        request=PolicyVersionCreateInputSerializer,
        responses={201: PolicyVersionOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        serializer = PolicyVersionCreateInputSerializer(data=request.data)
        if not serializer.is_valid():
            raise ValidationError(_with_content_problems(serializer.errors, request.data))
        data = dict(serializer.validated_data)
        try:
            version = policy_version_create(**data, created_by=request.user)
        except GateRefused as error:
            # Nothing was stored: the version's insert rolled back with the refusal.
            error.error_dict["override_reason"].extend(
                DjangoValidationError(f"gate: {reason}") for reason in error.report["reasons"]
            )
            raise _policy_problems(error) from None
        except DjangoValidationError as error:
            raise _policy_problems(error) from None
        return Response(
            PolicyVersionOutputSerializer(policy_version_list().get(pk=version.pk)).data,
            status=status.HTTP_201_CREATED,
        )


class PolicyVersionActivateInputSerializer(serializers.Serializer):
    comment = serializers.CharField(
        required=False,
        default="activated through the API",
        help_text="Why the version is activated; recorded in its activation history.",
    )
    override_reason = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        help_text="Required when the regression gate refuses the version: why activate anyway.",
    )


def _optional_json(request: Request) -> object:
    """The JSON body, else {}: the endpoint took no body before its comment, so a caller
    posting nothing (a client may still name a form content type) activates with defaults."""
    if request.content_type.startswith("application/json"):
        return request.data
    return {}


class PolicyVersionActivateApi(APIView):
    """Make a version the one new runs pin (the active one before is retired), after the
    regression gate (guardian_core/policy_gate.py). 400 when the version is invalid, or when
    the gate refuses and no override_reason is given (the body lists the gate's reasons)."""

    permission_classes = [HasRequiredPermission]
    required_permission = "guardian_core.manage_policy"

    @extend_schema(
        request=PolicyVersionActivateInputSerializer,
        responses={200: PolicyVersionOutputSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        version = PolicyVersion.objects.filter(pk=pk).first()
        if version is None:
            raise NotFound("No such policy version.")
        serializer = PolicyVersionActivateInputSerializer(data=_optional_json(request))
        serializer.is_valid(raise_exception=True)
        report = gate_report(candidate=version)
        try:
            policy_version_activate(
                version_id=pk,
                user=request.user,
                gate_report=report,
                **serializer.validated_data,
            )
        except DjangoValidationError as error:
            if "override_reason" in getattr(error, "error_dict", {}):
                error.error_dict["override_reason"].extend(
                    DjangoValidationError(reason) for reason in report["reasons"]
                )
            raise _policy_problems(error) from None
        return Response(PolicyVersionOutputSerializer(policy_version_list().get(pk=pk)).data)


# ---- /api/: what there is -------------------------------------------------------------------

# (url name, method, path, what it does): the index. A test resolves each path to its name.
API_ENDPOINTS = (
    ("schema", "GET", "/api/schema/", "The OpenAPI 3 schema of this API."),
    ("docs", "GET", "/api/docs/", "The schema as a browsable page (Swagger UI)."),
    ("run-list", "GET", "/api/runs/",
     "Runs, newest first, by keyset pages (follow `next`); the runs page's filters: status, "
     "outcome, stop_reason, since, until, policy, model, escalated, tool, q."),
    ("run-start", "POST", "/api/runs/start/", "Start a run."),
    ("run-detail", "GET", "/api/runs/{id}/", "One run with its latest turns."),
    ("run-cancel", "POST", "/api/runs/{id}/cancel/", "Cancel a run."),
    ("run-steps", "GET", "/api/runs/{id}/steps/",
     "An external run: where it stands (the next step, one waiting for results, an escalation)."),
    ("run-steps", "POST", "/api/runs/{id}/steps/",
     "An external run: propose its next step; every call validated, the whole step gated."),
    ("run-step", "GET", "/api/runs/{id}/steps/{step}/", "An external run's step as recorded."),
    ("run-step-results", "POST", "/api/runs/{id}/steps/{step}/results/",
     "An external run: report a step's results; Guardian decides it."),
    ("run-turn-list", "GET", "/api/runs/{id}/turns/", "A run's turns, a page at a time."),
    ("run-turn-detail", "GET", "/api/runs/{id}/turns/{index}/",
     "One turn: its calls, decision and escalations."),
    ("run-export", "GET", "/api/runs/{id}/export/",
     "A run as one JSON document (the run page's export; manage.py import_run reads it)."),
    ("run-decisions-csv", "GET", "/api/runs/{id}/decisions.csv",
     "A run's decision log as CSV, in chain order."),
    ("decision-log-csv", "GET", "/api/decisions.csv",
     "The decision log of every run the runs filters match, as CSV, streamed."),
    ("escalation-list", "GET", "/api/escalations/",
     "Open escalations, the nearest deadline first."),
    ("escalation-detail", "GET", "/api/escalations/{id}/",
     "One escalation, its held calls and the hash to approve each by."),
    ("escalation-claim", "POST", "/api/escalations/{id}/claim/", "Claim an escalation."),
    ("escalation-wait", "GET", "/api/escalations/{id}/wait",
     "An external run's escalation: its verdict as soon as there is one (long poll, ≤ 30 s)."),
    ("escalation-release", "POST", "/api/escalations/{id}/release/",
     "Release or skip an escalation."),
    ("escalation-resolve", "POST", "/api/escalations/{id}/resolve/",
     "Approve, reject or answer an escalation."),
    ("escalation-extend", "POST", "/api/escalations/{id}/extend/",
     "Extend an escalation's deadline, once."),
    ("example-list", "GET", "/api/examples/",
     "Labelled examples, newest first; filters: condition, source, since, until."),
    ("example-export", "GET", "/api/examples/export/",
     "Labelled examples as JSON Lines (the trace format), streamed."),
    ("policy-version-list", "GET", "/api/policy-versions/", "Policy versions, newest first."),
    ("policy-version-create", "POST", "/api/policy-versions/create/",
     "Create a policy version (a draft; with activate=true, through the regression gate)."),
    ("policy-version-activate", "POST", "/api/policy-versions/{id}/activate/",
     "Activate a policy version."),
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
                "authentication": "`Authorization: Bearer <token>` (an admin creates tokens in "
                "the Django admin; each is shown once), or the browser's session.",
                "errors": 'Every error is a JSON object mapping each bad field, or "detail" for '
                "the request as a whole, to a list of messages.",
            }
        )


class ApiNotFoundApi(APIView):
    """Any other path under /api/: a 404 in the API's error shape (not the HTML page), naming
    where the endpoints are listed."""

    permission_classes = [AllowAny]

    @extend_schema(exclude=True)
    def get(self, request: Request, rest: str) -> Response:
        raise NotFound(f"No API endpoint at /api/{rest}; GET /api/ lists them.")

    post = put = patch = delete = get
