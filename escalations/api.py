"""API endpoints for escalations."""

from rest_framework import serializers
from rest_framework.generics import ListAPIView

from escalations.models import Escalation
from escalations.selectors import escalation_list_open
from guardian_core.api import HasRequiredPermission


class EscalationOutputSerializer(serializers.ModelSerializer):
    turn_index = serializers.IntegerField(source="turn.index", read_only=True)

    class Meta:
        model = Escalation
        fields = [
            "id",
            "run",
            "turn_index",
            "kind",
            "status",
            "summary",
            "reason",
            "deadline",
            "created_at",
        ]


class EscalationOpenListApi(ListAPIView):
    """Open escalations, the nearest deadline first."""

    permission_classes = [HasRequiredPermission]
    required_permission = "escalations.review_escalation"
    serializer_class = EscalationOutputSerializer

    def get_queryset(self):
        return escalation_list_open()
