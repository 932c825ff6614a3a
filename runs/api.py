"""API endpoints for runs."""

import django_filters
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from guardian_core.api import HasRequiredPermission
from runs.models import Decision, Run, RunStatus, ToolCall, Turn
from runs.selectors import run_get, run_list, run_turn_get, run_turns_for_api
from runs.services import RunError, run_cancel, run_start
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


class RunFilter(django_filters.FilterSet):
    """The run list's filters; a value that is not one of them is a 400 naming the parameter."""

    status = django_filters.ChoiceFilter(choices=RunStatus.choices)
    stop_reason = django_filters.CharFilter(max_length=60)
    created_after = django_filters.IsoDateTimeFilter(
        field_name="created_at", lookup_expr="gte", help_text="ISO 8601, inclusive."
    )
    created_before = django_filters.IsoDateTimeFilter(
        field_name="created_at", lookup_expr="lt", help_text="ISO 8601, exclusive."
    )
    policy_version = django_filters.NumberFilter(
        field_name="policy_version__number", min_value=1, max_value=2**31 - 1
    )

    class Meta:
        model = Run
        fields = ["status", "stop_reason", "created_after", "created_before", "policy_version"]


class RunListApi(ListAPIView):
    """Every run, newest first, filtered by status, stop reason, creation time and the policy
    version it pinned."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.audit_run"
    serializer_class = RunOutputSerializer
    filterset_class = RunFilter

    def get_queryset(self):
        # The turn count's GROUP BY drops the model's default ordering: said again here.
        return run_list().order_by("-created_at", "-id")


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


class RunDetailApi(RetrieveAPIView):
    """One run, with its latest turns."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.audit_run"
    serializer_class = RunDetailOutputSerializer

    def get_queryset(self):
        return run_list()


class RunTurnListApi(ListAPIView):
    """A run's turns, oldest first, a page at a time."""

    permission_classes = [HasRequiredPermission]
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

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.audit_run"

    @extend_schema(responses={200: TurnOutputSerializer})
    def get(self, request: Request, pk: int, index: int) -> Response:
        try:
            turn = run_turn_get(run_id=pk, index=index)
        except Turn.DoesNotExist:
            raise NotFound("No such turn.") from None
        return Response(TurnOutputSerializer(turn).data)


class RunCreateInputSerializer(serializers.Serializer):
    goal = serializers.CharField(max_length=MAX_GOAL_CHARS)
    acceptance_criteria = serializers.ListField(child=serializers.CharField(), required=False)
    tools = serializers.ListField(child=serializers.CharField(), allow_empty=True)
    actor = serializers.ChoiceField(choices=ACTORS)
    guardian = serializers.ChoiceField(choices=GUARDIANS, default="local")
    budgets = serializers.DictField(
        required=False,
        help_text="max_turns, max_tokens (whole numbers ≥ 1), max_cost, "
        "max_wall_seconds (numbers > 0); nothing else.",
    )
    config = serializers.DictField(
        required=False, help_text="The adapters' settings; each adapter takes only its own keys."
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
        if problems:
            raise serializers.ValidationError(problems_by_field(problems))
        return attrs


class RunCreateApi(APIView):
    """Start a run: it pins the active policy version and its first turn is enqueued."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.add_run"

    @extend_schema(request=RunCreateInputSerializer, responses={201: RunOutputSerializer})
    def post(self, request: Request) -> Response:
        serializer = RunCreateInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            run = run_start(**serializer.validated_data, created_by=request.user)
        except RunError as exc:  # what only run_start can know, e.g. no active policy version
            raise ValidationError({"detail": str(exc)}) from None
        return Response(RunOutputSerializer(run_get(run_id=run.pk)).data, status=201)


class RunCancelApi(APIView):
    """Cancel a run: it stops before its next turn; its open escalation closes as cancelled."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.change_run"

    @extend_schema(request=None, responses={200: RunOutputSerializer})
    def post(self, request: Request, pk: int) -> Response:
        if not Run.objects.filter(pk=pk).exists():
            raise NotFound()
        if not run_cancel(run_id=pk):
            raise ValidationError({"detail": "the run has already ended"})
        return Response(RunOutputSerializer(run_get(run_id=pk)).data)
