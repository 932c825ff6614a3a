"""API endpoints for runs."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from guardian_core.api import HasRequiredPermission
from runs.models import Run
from runs.selectors import run_get, run_list
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


class RunListApi(ListAPIView):
    """Every run, newest first."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.audit_run"
    serializer_class = RunOutputSerializer

    def get_queryset(self):
        return run_list()


class RunDetailApi(RetrieveAPIView):
    """One run."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.audit_run"
    serializer_class = RunOutputSerializer

    def get_queryset(self):
        return run_list()


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
