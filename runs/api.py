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
    goal = serializers.CharField()
    acceptance_criteria = serializers.ListField(child=serializers.CharField(), required=False)
    tools = serializers.ListField(child=serializers.CharField(), allow_empty=True)
    actor = serializers.ChoiceField(choices=["scripted", "openai"])
    guardian = serializers.ChoiceField(
        choices=["scripted", "local", "http", "openai"], default="local"
    )
    budgets = serializers.DictField(required=False)
    config = serializers.DictField(required=False)


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
        except RunError as exc:
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
