"""The API's shared permission check, and the policy version endpoints."""

from django.db import OperationalError
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from guardian_core.db import conflict_code
from guardian_core.models import PolicyVersion
from guardian_core.selectors import policy_version_list


def exception_handler(exc: Exception, context: dict) -> Response | None:
    """DRF's handler, plus: a transaction that lost a race even after its retries (see
    guardian_core.db.retry_on_conflict) is a 409 the caller may retry, never a 500."""
    if isinstance(exc, OperationalError) and conflict_code(exc):
        return Response(
            {"detail": "Another change to this run happened at the same time; try again."},
            status=status.HTTP_409_CONFLICT,
        )
    return drf_exception_handler(exc, context)


class HasRequiredPermission(BasePermission):
    """Allows a signed-in user holding the view's `required_permission`, nobody else.

    DRF's DjangoModelPermissions lets any signed-in user read; Guardian's screens are per role,
    so the API checks the same permission as the matching page.
    """

    def has_permission(self, request: Request, view) -> bool:
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
