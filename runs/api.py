"""API endpoints for runs."""

import hashlib
import json
import re

from django.db import IntegrityError
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers
from rest_framework.exceptions import (
    APIException,
    MethodNotAllowed,
    NotFound,
    PermissionDenied,
    ValidationError,
)
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import replace_query_param
from rest_framework.views import APIView

from guardian_core.api import HasRequiredPermission
from guardian_core.api_schema import ErrorResponse
from runs.audit import CSV_COLUMNS, decision_csv_lines, run_export_text
from runs.external import EXTERNAL, external_run_start, external_run_summary
from runs.models import Decision, DecisionOutcome, Run, RunStatus, RunWebhook, ToolCall, Turn
from runs.presentation import decision_log_filename
from runs.selectors import (
    RUN_LIST_PAGE_MAX,
    RUN_LIST_PARAMETERS,
    RUN_PROBE_WINDOW,
    RUN_SEARCH_MAX_CHARS,
    RunFilters,
    run_filters_from,
    run_get,
    run_list,
    run_list_filtered,
    run_turn_get,
    run_turns_for_api,
)
from runs.services import RunError, run_cancel, run_start
from runs.stop_reasons import STOP_REASONS
from runs.validation import ACTORS, GUARDIANS, MAX_GOAL_CHARS, problems_by_field, run_input_problems


class RunOutputSerializer(serializers.ModelSerializer):
    policy_version = serializers.IntegerField(source="policy_version.number", read_only=True)
    turn_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Run
        fields = [
            "id",
            "goal",
            "acceptance_criteria",
            "status",
            "stop_reason",
            "final_answer",
            "policy_version",
            "actor",
            "guardian",
            "tools",
            "budgets",
            "turn_count",
            "created_at",
            "updated_at",
            "finished_at",
        ]


class RunListItemOutputSerializer(RunOutputSerializer):
    last_outcome = serializers.ChoiceField(
        choices=DecisionOutcome.choices,
        allow_null=True,
        read_only=True,
        help_text="The outcome of the run's last decision (null before the first).",
    )
    escalation_count = serializers.IntegerField(read_only=True)

    class Meta(RunOutputSerializer.Meta):
        fields = [*RunOutputSerializer.Meta.fields, "last_outcome", "escalation_count"]


class RunListPageOutputSerializer(serializers.Serializer):
    results = RunListItemOutputSerializer(many=True)
    next = serializers.CharField(
        allow_null=True, help_text="The next page's address (null on the last page)."
    )
    looked_back_to = serializers.DateTimeField(
        allow_null=True,
        help_text="Set when a filter on calls, decisions or escalations looked through "
        f"{RUN_PROBE_WINDOW} runs without filling the page: the creation time of the oldest "
        "run it looked at. `next` goes on from there.",
    )


RUN_LIST_DEFAULT_LIMIT = 50
_RUN_LIST_CHOICES = {
    "status": RunStatus.values,
    "outcome": DecisionOutcome.values,
    "stop_reason": list(STOP_REASONS),
    "escalated": ["yes", "no"],
}
# The bounds run_filters_from checks, for the schema (a value past them is a 400 all the same).
_RUN_LIST_TYPES = {
    "since": OpenApiTypes.DATE,
    "until": OpenApiTypes.DATE,
    "policy": {"type": "integer", "minimum": 1, "maximum": 2**31 - 1},
    "model": {"type": "string", "maxLength": 120},
    "tool": {"type": "string", "maxLength": 120},
    "q": {"type": "string", "maxLength": RUN_SEARCH_MAX_CHARS},
}
RUN_LIST_SCHEMA_PARAMETERS = [
    *(
        OpenApiParameter(
            name,
            _RUN_LIST_TYPES.get(name, OpenApiTypes.STR),
            description=description,
            enum=_RUN_LIST_CHOICES.get(name),
        )
        for name, description in RUN_LIST_PARAMETERS.items()
    ),
    OpenApiParameter(
        "limit",
        {"type": "integer", "minimum": 1, "maximum": RUN_LIST_PAGE_MAX},
        description=f"Runs a page, 1 to {RUN_LIST_PAGE_MAX} (default {RUN_LIST_DEFAULT_LIMIT}).",
    ),
]


def _run_filters_input(params, *, also: tuple[str, ...] = ()) -> tuple[RunFilters, list[str]]:
    """The runs page's filters from the query, read by the page's own run_filters_from, and
    the problems so far: each bad value, and each parameter that is neither a filter nor one
    of `also` (say the `offset` of other lists, or a misspelt filter, which would otherwise
    be ignored and the caller take an unfiltered list for a filtered one)."""
    filters, problems = run_filters_from(params)
    known = [*RUN_LIST_PARAMETERS, *also]
    problems += [
        f"{name}: not a parameter here; the parameters are {', '.join(known)}"
        for name in params
        if name not in known
    ]
    return filters, problems


def _run_list_input(params) -> tuple[RunFilters, str | None, int]:
    """The filters, the cursor and the page size; every bad or unknown parameter is named in
    one 400."""
    filters, problems = _run_filters_input(params, also=("limit",))
    limit = RUN_LIST_DEFAULT_LIMIT
    if (raw := params.get("limit")) is not None:
        text = raw.strip()
        # Digits and length first: int() of a 100 000-digit string is itself refused.
        digits = text.isascii() and text.isdecimal() and len(text) <= 4
        if digits and 1 <= int(text) <= RUN_LIST_PAGE_MAX:
            limit = int(text)
        else:
            problems.append(f"limit: must be a whole number from 1 to {RUN_LIST_PAGE_MAX}")
    if problems:
        raise ValidationError(problems_by_field(problems))
    return filters, params.get("after") or None, limit


class RunListApi(APIView):
    """Every run, newest first, a keyset page at a time, under exactly the filters of the
    auditors' runs page (the same parameters, read by the same code): status, last outcome,
    stop reason, date range, policy version, guardian model version, escalated, tool used and
    the goal search. Follow `next` for the next page."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.audit_run"

    def http_method_not_allowed(self, request: Request, *args, **kwargs):
        # A POST here is most likely meant to start a run: say where that is.
        raise MethodNotAllowed(
            request.method,
            detail=_('Method "%(method)s" not allowed here; a run is started with POST %(url)s')
            % {"method": request.method, "url": reverse("api:run-start")},
        )

    @extend_schema(
        operation_id="runs_list",
        parameters=RUN_LIST_SCHEMA_PARAMETERS,
        responses={200: RunListPageOutputSerializer, 400: ErrorResponse},
    )
    def get(self, request: Request) -> Response:
        filters, after, limit = _run_list_input(request.query_params)
        page = run_list_filtered(filters=filters, after=after, limit=limit)
        # The page's rows hold only what the runs page shows; the API's whole runs are read
        # by their ids, one more query for the page.
        full = run_list().in_bulk([run.pk for run in page.items])
        runs = []
        for item in page.items:
            run = full[item.pk]
            run.last_outcome = item.last_outcome
            run.escalation_count = item.escalation_count
            runs.append(run)
        next_url = None
        if page.next_cursor:
            next_url = replace_query_param(request.build_absolute_uri(), "after", page.next_cursor)
        return Response(
            {
                "results": RunListItemOutputSerializer(runs, many=True).data,
                "next": next_url,
                "looked_back_to": (
                    serializers.DateTimeField().to_representation(page.looked_back_to)
                    if page.looked_back_to
                    else None
                ),
            }
        )


class ToolCallOutputSerializer(serializers.ModelSerializer):
    result = serializers.CharField(
        allow_null=True, read_only=True, help_text="Verbatim tool output: untrusted data."
    )

    class Meta:
        model = ToolCall
        fields = [
            "position",
            "tool",
            "arguments",
            "intent",
            "risk_class",
            "status",
            "idempotency_key",
            "result",
            "error",
            "started_at",
            "finished_at",
        ]


class DecisionOutputSerializer(serializers.ModelSerializer):
    policy_version = serializers.IntegerField(source="policy_version.number", read_only=True)

    class Meta:
        model = Decision
        fields = [
            "outcome",
            "answers",
            "risk_answers",
            "fired",
            "call_signatures",
            "stop_reason",
            "thresholds",
            "reasons",
            "policy_version",
            "question_set_version",
            "guardian_model_version",
            "state_hash",
            "created_at",
        ]


class TurnSummarySerializer(serializers.ModelSerializer):
    outcome = serializers.CharField(source="decision.outcome", read_only=True, allow_null=True)
    call_count = serializers.SerializerMethodField()

    class Meta:
        model = Turn
        fields = ["index", "state_hash", "outcome", "call_count", "started_at", "finished_at"]

    def get_call_count(self, turn: Turn) -> int:
        return len(turn.tool_calls.all())


class _EscalationOfTurnSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.CharField()


class TurnOutputSerializer(serializers.ModelSerializer):
    tool_calls = ToolCallOutputSerializer(many=True, read_only=True)
    decision = serializers.SerializerMethodField()
    escalations = _EscalationOfTurnSerializer(many=True, read_only=True)

    class Meta:
        model = Turn
        fields = [
            "index",
            "state_hash",
            "proposal",
            "projection",
            "usage",
            "feedback",
            "timings",
            "started_at",
            "finished_at",
            "tool_calls",
            "decision",
            "escalations",
        ]

    @extend_schema_field(DecisionOutputSerializer(allow_null=True))
    def get_decision(self, turn: Turn) -> dict | None:
        decision = getattr(turn, "decision", None)
        return None if decision is None else DecisionOutputSerializer(decision).data


# A run's detail shows its latest turns, at most this many; /turns/ pages through them all.
DETAIL_TURNS = 50


class RunDetailOutputSerializer(RunOutputSerializer):
    turns = serializers.SerializerMethodField(
        help_text=f"The latest {DETAIL_TURNS} turns, oldest first; every turn: turns/."
    )

    class Meta(RunOutputSerializer.Meta):
        fields = [*RunOutputSerializer.Meta.fields, "turns"]

    @extend_schema_field(TurnSummarySerializer(many=True))
    def get_turns(self, run: Run) -> list:
        latest = list(run_turns_for_api(run_id=run.pk).order_by("-index")[:DETAIL_TURNS])
        return TurnSummarySerializer(reversed(latest), many=True).data


class ReadsOrStartedRun(HasRequiredPermission):
    """The view's permission (an auditor's, for every run), or the run in the URL is one the
    user started: whoever starts a run through the API may read it, and cancel it."""

    def has_permission(self, request: Request, view) -> bool:
        if super().has_permission(request, view):
            return True
        user, pk = request.user, view.kwargs.get("pk")
        return bool(
            user
            and user.is_authenticated
            and pk is not None
            and Run.objects.filter(pk=pk, created_by_id=user.pk).exists()
        )


class RunDetailApi(RetrieveAPIView):
    """One run, with its latest turns."""

    permission_classes = [ReadsOrStartedRun]
    required_permission = "runs.audit_run"
    serializer_class = RunDetailOutputSerializer

    def get_queryset(self):
        return run_list()


class RunTurnListApi(ListAPIView):
    """A run's turns, oldest first, a page at a time."""

    permission_classes = [ReadsOrStartedRun]
    required_permission = "runs.audit_run"
    serializer_class = TurnSummarySerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator, with no run
            return Turn.objects.none()
        get_object_or_404(Run.objects.only("pk"), pk=self.kwargs["pk"])
        return run_turns_for_api(run_id=self.kwargs["pk"])


class RunTurnDetailApi(APIView):
    """One turn: its proposal, what the guardian saw, every call with its (untrusted) result,
    the decision with the probabilities and thresholds in force, and its escalations."""

    permission_classes = [ReadsOrStartedRun]
    required_permission = "runs.audit_run"

    @extend_schema(responses={200: TurnOutputSerializer})
    def get(self, request: Request, pk: int, index: int) -> Response:
        try:
            turn = run_turn_get(run_id=pk, index=index)
        except Turn.DoesNotExist:
            raise NotFound(_("No such turn.")) from None
        return Response(TurnOutputSerializer(turn).data)


# ---- exports: the same bytes as the auditors' pages ------------------------------------------

CSV_RESPONSE = OpenApiResponse(
    OpenApiTypes.STR,
    description="One header line, then one line a decision: " + ", ".join(CSV_COLUMNS) + ".",
)


class RunExportApi(APIView):
    """The run as one JSON document (run, policy version, turns with their calls and
    decisions, escalations with their verdicts, hashes and the chain's head): the same bytes
    as the run page's export and `manage.py export_run`; `manage.py import_run` reads it."""

    permission_classes = [ReadsOrStartedRun]
    required_permission = "runs.audit_run"

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, pk: int) -> HttpResponse:
        run = Run.objects.select_related("policy_version", "created_by").filter(pk=pk).first()
        if run is None:
            raise NotFound(_("No such run."))
        response = HttpResponse(
            run_export_text(run), content_type="application/json; charset=utf-8"
        )
        response["Content-Disposition"] = f'attachment; filename="run-{run.pk}.json"'
        return response


class RunDecisionCsvApi(APIView):
    """The run's decision log as CSV in chain order, streamed: the same bytes as the run
    page's CSV."""

    permission_classes = [ReadsOrStartedRun]
    required_permission = "runs.audit_run"

    @extend_schema(responses={(200, "text/csv"): CSV_RESPONSE})
    def get(self, request: Request, pk: int) -> StreamingHttpResponse:
        if not Run.objects.filter(pk=pk).exists():
            raise NotFound(_("No such run."))
        response = StreamingHttpResponse(
            decision_csv_lines(run_id=pk), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = f'attachment; filename="run-{pk}-decisions.csv"'
        return response


class DecisionLogCsvApi(APIView):
    """The decision log of every run the runs list's filters match, as CSV, streamed run by
    run in chain order: the same bytes as the runs page's "Decision log (CSV)" link."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.audit_run"

    @extend_schema(
        parameters=[p for p in RUN_LIST_SCHEMA_PARAMETERS if p.name not in ("after", "limit")],
        responses={(200, "text/csv"): CSV_RESPONSE, 400: ErrorResponse},
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        params = request.query_params
        # The list's cursor means nothing to an export of every matching run.
        filters, problems = _run_filters_input(params)
        if "after" in params:
            problems.append("after: the export holds every matching run; it has no pages")
        if problems:
            raise ValidationError(problems_by_field(problems))
        response = StreamingHttpResponse(
            decision_csv_lines(filters=filters), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = f'attachment; filename="{decision_log_filename()}"'
        return response


class RunCreateInputSerializer(serializers.Serializer):
    # Blank passes here so that validate() names it with every other bad field at once.
    goal = serializers.CharField(max_length=MAX_GOAL_CHARS, allow_blank=True)
    acceptance_criteria = serializers.ListField(child=serializers.CharField(), required=False)
    tools = serializers.ListField(
        child=serializers.JSONField(),
        allow_empty=True,
        help_text="Names of registered tools; an external run may also define its own: "
        "{name, description, parameters (a JSON Schema of the arguments), risk_class}.",
    )
    actor = serializers.ChoiceField(
        choices=ACTORS,
        help_text="external: the run's loop runs in the caller's process, which proposes each "
        "step and reports its results (POST /api/runs/{id}/steps/).",
    )
    guardian = serializers.ChoiceField(choices=GUARDIANS, default="local")
    budgets = serializers.DictField(
        required=False,
        help_text="max_turns, max_tokens (whole numbers ≥ 1), max_cost, "
        "max_wall_seconds (numbers > 0); nothing else.",
    )
    config = serializers.DictField(
        required=False, help_text="The adapters' settings; each adapter takes only its own keys."
    )
    policy_version = serializers.IntegerField(
        required=False,
        min_value=1,
        help_text="A policy version's number (default: the active one).",
    )
    webhook_url = serializers.URLField(
        required=False,
        max_length=2000,
        help_text="External runs: where each verdict is POSTed, signed (X-Guardian-Signature: "
        "sha256=HMAC of the body with the webhook_secret this answer gives once).",
    )

    def validate(self, attrs: dict) -> dict:
        # The same checks run_start makes, reported per field: a run that could never run is
        # refused here instead of sitting "running" until the sweeper gives up on it.
        problems = run_input_problems(
            goal=attrs["goal"],
            acceptance_criteria=attrs.get("acceptance_criteria"),
            tools=attrs["tools"],
            actor=attrs["actor"],
            guardian=attrs["guardian"],
            budgets=attrs.get("budgets"),
            config=attrs.get("config"),
        )
        if attrs.get("webhook_url") and attrs["actor"] != "external":
            problems.append("webhook_url: only an external run's verdicts go to a webhook")
        if problems:
            raise serializers.ValidationError(problems_by_field(problems))
        return attrs


class RunCreateApi(APIView):
    """Start a run: it pins the active policy version and its first turn is enqueued."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.add_run"

    @extend_schema(
        request=RunCreateInputSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="Send the same key with every retry of one start (e.g. a uuid): a "
                "retry whose first answer was lost gets the run it made (200), not a second run; "
                "the key with another request is a 409.",
            )
        ],
        responses={201: RunOutputSerializer, 200: RunOutputSerializer},
    )
    def post(self, request: Request) -> Response:
        serializer = RunCreateInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        external = data["actor"] == EXTERNAL
        if external and not request.user.has_perm("runs.drive_run"):
            raise PermissionDenied(_("an external run is driven by its caller: runs.drive_run"))
        webhook_url = data.pop("webhook_url", "")
        key = request.headers.get("Idempotency-Key", "")
        if key:
            if not START_KEY.fullmatch(key):
                raise ValidationError(
                    {"Idempotency-Key": _("1 to 128 letters, digits and . _ : - (e.g. a uuid)")}
                )
            data["start_key"] = key
            data["start_digest"] = hashlib.sha256(
                json.dumps(request.data, sort_keys=True, default=str).encode()
            ).hexdigest()
            earlier = _started_under(request.user, key)
            if earlier is not None:
                return _start_again(earlier, data["start_digest"])
        try:
            if external:
                data.pop("actor")
                run, secret = external_run_start(
                    **data, webhook_url=webhook_url, created_by=request.user
                )
            else:
                run, secret = run_start(**data, created_by=request.user), ""
        except RunError as exc:  # what only run_start can know, e.g. no active policy version
            raise ValidationError({"detail": str(exc)}) from None
        except IntegrityError:
            # The same key sent twice at once: the other request made the run.
            earlier = _started_under(request.user, key) if key else None
            if earlier is None:
                raise
            return _start_again(earlier, data["start_digest"])
        body = RunOutputSerializer(run_get(run_id=run.pk)).data
        if external:
            # Where its caller goes next; the webhook's secret is shown here only.
            body = {**body, **external_run_summary(run)}
            if secret:
                body["webhook_secret"] = secret
        return Response(body, status=201)


START_KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class StartKeyConflict(APIException):
    status_code = 409
    default_detail = gettext_lazy("conflict")


def _started_under(user, key: str) -> Run | None:
    return Run.objects.filter(created_by=user, start_key=key).first()


def _start_again(run: Run, digest: str) -> Response:
    """A retried start: the run its key made, as the first answer gave it (200, not 201: nothing
    new was made), or 409 if the key came with another request."""
    if run.start_digest != digest:
        raise StartKeyConflict(
            _(
                "Idempotency-Key already started run %(run)s with another request; "
                "use a new key for a new run"
            )
            % {"run": run.pk}
        )
    body = RunOutputSerializer(run_get(run_id=run.pk)).data
    if run.actor == EXTERNAL:
        body = {**body, **external_run_summary(run)}
        webhook = RunWebhook.objects.filter(run=run).first()
        if webhook is not None:  # the same caller, whose first answer was lost
            body["webhook_secret"] = webhook.secret
    return Response(body, status=200)


class RunCancelApi(APIView):
    """Cancel a run (any run with runs.change_run, or one the user started): no call of it
    starts after this; its open escalation closes as cancelled."""

    permission_classes = [ReadsOrStartedRun]
    required_permission = "runs.change_run"

    @extend_schema(request=None, responses={200: RunOutputSerializer})
    def post(self, request: Request, pk: int) -> Response:
        if not Run.objects.filter(pk=pk).exists():
            raise NotFound()
        if not run_cancel(run_id=pk):
            raise ValidationError({"detail": _("the run has already ended")})
        return Response(RunOutputSerializer(run_get(run_id=pk)).data)
