"""API endpoints for runs."""

from rest_framework import serializers
from rest_framework.generics import ListAPIView, RetrieveAPIView

from guardian_core.api import HasRequiredPermission
from runs.models import Run
from runs.selectors import run_list


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
