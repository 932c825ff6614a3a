"""The API's shared permission check, and the policy version endpoints."""

from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from guardian_core.models import PolicyVersion
from guardian_core.selectors import policy_version_list


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
