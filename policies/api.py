"""The policy version endpoints of the API: list, create (validated in full), activate (gated)."""

from collections.abc import Mapping

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from guardian_core.api import HasRequiredPermission
from guardian_core.models import PolicyVersion, problems_by_field
from guardian_core.policy_validation import policy_version_problems
from guardian_core.said import worded
from policies.policy_gate import gate_report
from policies.selectors import policy_version_list
from policies.services import (
    GateRefused,
    policy_version_activate,
    policy_version_create,
    policy_version_unregistered_problems,
)
from runs.validation import storable_json


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


class PolicyVersionCreateInputSerializer(serializers.Serializer):
    label = serializers.CharField(allow_blank=True, default="", max_length=120)
    question_set_version = serializers.CharField(max_length=40)
    thresholds = serializers.DictField(
        validators=[storable_json("thresholds")],
        help_text=gettext_lazy(
            "Per condition: c_stop, c_cont, delta (t* is computed from the costs), ..."
        ),
    )
    question_set = serializers.DictField(
        validators=[storable_json("question_set")],
        help_text=gettext_lazy("Per condition: the typed question asked."),
    )
    quorum = serializers.DictField(
        required=False,
        validators=[storable_json("quorum")],
        help_text=gettext_lazy(
            'Two distinct approvers for some held calls: {"regulated": true, "tools": [..]}.'
        ),
    )
    judge = serializers.DictField(
        required=False,
        validators=[storable_json("judge")],
        help_text=gettext_lazy(
            'A second-tier judge on the uncertain band: {"adapter": "openai", "model": "…", '
            '"conditions": ["goal_reached", …], "timeout_seconds": 10}; none when absent.'
        ),
    )
    limits = serializers.DictField(
        required=False,
        validators=[storable_json("limits")],
        help_text=gettext_lazy(
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
        help_text=gettext_lazy(
            "The id of the version this one is edited from: recorded, and a question reworded "
            "from it needs a new question_set_version."
        ),
    )
    activate = serializers.BooleanField(
        default=False,
        help_text=gettext_lazy(
            "Activate it at once, through the regression gate: refused (and nothing stored) "
            "without override_reason when the gate refuses."
        ),
    )
    comment = serializers.CharField(
        required=False,
        default="created and activated through the API",
        help_text=gettext_lazy("With activate: why; recorded in the activation history."),
    )
    override_reason = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        help_text=gettext_lazy("With activate: why go ahead when the regression gate refuses."),
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
                DjangoValidationError(f"gate: {worded(reason)}")
                for reason in error.report["reasons"]
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
        help_text=gettext_lazy("Why the version is activated; recorded in its activation history."),
    )
    override_reason = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        help_text=gettext_lazy(
            "Required when the regression gate refuses the version: why activate anyway."
        ),
    )


def _optional_json(request: Request) -> object:
    """The JSON body, else {}: the endpoint took no body before its comment, so a caller
    posting nothing (a client may still name a form content type) activates with defaults."""
    if request.content_type.startswith("application/json"):
        return request.data
    return {}


class PolicyVersionActivateApi(APIView):
    """Make a version the one new runs pin (the active one before is retired), after the
    regression gate (policies/policy_gate.py). 400 when the version is invalid, or when
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
            raise NotFound(_("No such policy version."))
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
                    DjangoValidationError(worded(reason)) for reason in report["reasons"]
                )
            raise _policy_problems(error) from None
        return Response(PolicyVersionOutputSerializer(policy_version_list().get(pk=pk)).data)
