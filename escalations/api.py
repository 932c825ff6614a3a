"""API endpoints for escalations (list, read, claim, release, resolve, extend) and the labelled
examples they become. Every write goes through escalations/claims.py and verdicts.py, with the
reviewers' page's rules: the page and the API cannot disagree on what a verdict may do."""

from django.http import StreamingHttpResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from escalations.claims import escalation_claim, escalation_extend_deadline, escalation_release
from escalations.decision_pane import uncertain_conditions
from escalations.errors import EscalationError
from escalations.examples import (
    EXAMPLE_FILTER_FIELDS,
    example_filters_from,
    labelled_example_ids,
    labelled_examples_export,
    labelled_examples_jsonl,
)
from escalations.held_calls import approval_edits, escalation_held_calls
from escalations.models import (
    VERDICT_REASON_MAX_CHARS,
    Escalation,
    EscalationKind,
    ExampleSelection,
    Verdict,
    VerdictDecision,
)
from escalations.queue import (
    escalation_claim_holder,
    escalation_get,
    escalation_list_open,
    queue_filters_from,
)
from escalations.verdicts import AlreadyDecided, escalation_resolve
from guardian_core.api import HasRequiredPermission, error_body
from guardian_core.api_schema import ErrorResponse
from guardian_core.pagination import BoundedLimitOffsetPagination
from runs.models import RiskClass
from runs.validation import problems_by_field, storable_json

REVIEW = "escalations.review_escalation"
# Upper bounds on what a verdict may name: far above any step, far below a database overflow.
MAX_POSITION = 10_000
MAX_REASON_CHARS = VERDICT_REASON_MAX_CHARS


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


# The queue's filters the list takes, as the reviewers' queue reads them (queue_filters_from),
# and the pagination's own parameters.
ESCALATION_LIST_FILTERS = ("kind", "condition", "tool", "run", "holder")
_PAGINATION = ("limit", "offset")


def unknown_parameters(params, known: tuple[str, ...]) -> list[str]:
    """A problem for each query parameter that is not one of `known`: a misspelt filter would
    otherwise be ignored, and the caller take an unfiltered list for a filtered one."""
    return [
        f"{name}: "
        + _("not a parameter here; the parameters are %(known)s") % {"known": ", ".join(known)}
        for name in params
        if name not in known
    ]


class EscalationOpenListApi(ListAPIView):
    """Open escalations, the nearest deadline first, under the queue's filters (kind,
    condition, tool, run, holder). A bad or unknown parameter is a 400 naming each one."""

    permission_classes = [HasRequiredPermission]
    required_permission = REVIEW
    serializer_class = EscalationOutputSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter("kind", OpenApiTypes.STR, enum=EscalationKind.values),
            OpenApiParameter("condition", OpenApiTypes.STR, description="A triggered condition."),
            OpenApiParameter("tool", OpenApiTypes.STR, description="A tool a held call names."),
            OpenApiParameter("run", OpenApiTypes.INT, description="The run's number."),
            OpenApiParameter("holder", OpenApiTypes.STR, enum=["unclaimed", "mine"]),
        ],
        responses={200: EscalationOutputSerializer(many=True), 400: ErrorResponse},
    )
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        params = self.request.query_params
        filters, problems = queue_filters_from(
            {name: params.get(name, "") for name in ESCALATION_LIST_FILTERS}
        )
        problems += unknown_parameters(params, (*ESCALATION_LIST_FILTERS, *_PAGINATION))
        if problems:
            raise ValidationError(problems_by_field(problems))
        return escalation_list_open(filters=filters, reviewer=self.request.user)


# ---- one escalation ------------------------------------------------------------------------


class HeldCallOutputSerializer(serializers.Serializer):
    position = serializers.IntegerField()
    tool = serializers.CharField()
    description = serializers.CharField()
    arguments = serializers.JSONField()
    risk_class = serializers.CharField(help_text="The class the gate held it at.")
    declared_risk = serializers.CharField()
    guardian_risk = serializers.CharField()
    idempotency_key = serializers.CharField()
    action_hash = serializers.CharField(
        help_text="Send it back in resolve's seen_hashes: a call that changed since is refused."
    )
    needs_quorum = serializers.BooleanField()
    approvals = serializers.SerializerMethodField(help_text="Approvals given so far.")

    def get_approvals(self, call) -> int:
        return len(call.approvals)


class VerdictOutputSerializer(serializers.ModelSerializer):
    reviewer = serializers.CharField(source="reviewer.username", read_only=True)
    edited_arguments = serializers.SerializerMethodField(
        help_text="Each approved call a reviewer edited before approving it: position, tool, "
        'the change list [{"field", "before", "after"}] and its words ("call 0 (issue_refund) '
        'approved with edited arguments: amount 49.9 → 39.9").'
    )

    class Meta:
        model = Verdict
        fields = [
            "id",
            "decision",
            "reason",
            "answer",
            "approved_calls",
            "rerun",
            "risk_labels",
            "resulting_outcome",
            "reviewer",
            "edited_arguments",
            "created_at",
        ]

    def get_edited_arguments(self, verdict: Verdict) -> list[dict]:
        approvals = verdict.escalation.approvals.filter(
            original_arguments__isnull=False
        ).select_related("reviewer")
        return [
            edit
            for edit in approval_edits(approvals)
            if edit["position"] in (verdict.approved_calls or [])
        ]


class EscalationDetailOutputSerializer(EscalationOutputSerializer):
    held_calls = serializers.SerializerMethodField()
    questions = serializers.SerializerMethodField(
        help_text="The conditions a person may answer (decision answer)."
    )
    claimed_by = serializers.SerializerMethodField(help_text="Who holds it now, if anyone.")
    verdict = serializers.SerializerMethodField()

    class Meta(EscalationOutputSerializer.Meta):
        fields = [
            *EscalationOutputSerializer.Meta.fields,
            "deadline_extended",
            "claimed_by",
            "claim_expires_at",
            "resolved_at",
            "held_calls",
            "questions",
            "verdict",
        ]

    @extend_schema_field(HeldCallOutputSerializer(many=True))
    def get_held_calls(self, escalation: Escalation) -> list:
        return HeldCallOutputSerializer(escalation_held_calls(escalation), many=True).data

    def get_questions(self, escalation: Escalation) -> list[str]:
        return uncertain_conditions(escalation)

    def get_claimed_by(self, escalation: Escalation) -> str | None:
        holder = escalation_claim_holder(escalation)
        return None if holder is None else holder.get_username()

    @extend_schema_field(VerdictOutputSerializer(allow_null=True))
    def get_verdict(self, escalation: Escalation) -> dict | None:
        verdict = getattr(escalation, "verdict", None)  # a missing reverse one-to-one
        return None if verdict is None else VerdictOutputSerializer(verdict).data


def _escalation_or_404(escalation_id: int) -> Escalation:
    try:
        return escalation_get(escalation_id=escalation_id)
    except Escalation.DoesNotExist:
        raise NotFound(_("No such escalation.")) from None


def _detail(escalation_id: int) -> dict:
    return EscalationDetailOutputSerializer(_escalation_or_404(escalation_id)).data


class EscalationDetailApi(APIView):
    """One escalation: why it was raised, its held calls with the hash to approve each by, the
    questions a person may answer, who holds it, and its verdict once decided. Reading it
    claims nothing (POST claim/ does)."""

    permission_classes = [HasRequiredPermission]
    required_permission = REVIEW

    @extend_schema(responses={200: EscalationDetailOutputSerializer, 404: ErrorResponse})
    def get(self, request: Request, pk: int) -> Response:
        return Response(_detail(pk))


class EscalationClaimApi(APIView):
    """Claim an escalation for GUARDIAN_CLAIM_MINUTES (renewing your own claim); only its holder
    may decide it. 409 when someone else holds it or it is closed."""

    permission_classes = [HasRequiredPermission]
    required_permission = REVIEW

    @extend_schema(
        request=None,
        responses={200: EscalationDetailOutputSerializer, 404: ErrorResponse, 409: ErrorResponse},
    )
    def post(self, request: Request, pk: int) -> Response:
        _escalation_or_404(pk)
        claim = escalation_claim(escalation_id=pk, reviewer=request.user)
        if claim.status == "held":
            return _conflict(
                "claim: "
                + _("%(holder)s holds this escalation; only they may decide it")
                % {"holder": claim.holder}
            )
        if claim.status == "closed":
            return _conflict(
                _("escalation %(id)s is already %(status)s")
                % {"id": pk, "status": claim.escalation.status}
            )
        return Response(_detail(pk))


class ReleaseInputSerializer(serializers.Serializer):
    skip = serializers.BooleanField(
        default=False, help_text="A skip is recorded in the history even when you did not hold it."
    )
    reason = serializers.CharField(allow_blank=True, default="", max_length=2000)


class EscalationReleaseApi(APIView):
    """Let go of an escalation you hold (or skip it, with an optional reason): it goes back to
    the queue for someone else."""

    permission_classes = [HasRequiredPermission]
    required_permission = REVIEW

    @extend_schema(
        request=ReleaseInputSerializer,
        responses={200: EscalationDetailOutputSerializer, 400: ErrorResponse, 404: ErrorResponse},
    )
    def post(self, request: Request, pk: int) -> Response:
        serializer = ReleaseInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        _escalation_or_404(pk)
        escalation_release(
            escalation_id=pk,
            reviewer=request.user,
            note=serializer.validated_data["reason"],
            skipped=serializer.validated_data["skip"],
        )
        return Response(_detail(pk))


class EscalationExtendApi(APIView):
    """Push the deadline back once (GUARDIAN_DEADLINE_EXTENSION_MINUTES): only its holder,
    only before the deadline. 400 naming why not."""

    permission_classes = [HasRequiredPermission]
    required_permission = REVIEW

    @extend_schema(
        request=None,
        responses={200: EscalationDetailOutputSerializer, 400: ErrorResponse, 404: ErrorResponse},
    )
    def post(self, request: Request, pk: int) -> Response:
        _escalation_or_404(pk)
        try:
            escalation_extend_deadline(escalation_id=pk, reviewer=request.user)
        except EscalationError as error:
            raise ValidationError(problems_by_input_field(error.problems)) from None
        return Response(_detail(pk))


# ---- the verdict -----------------------------------------------------------------------------


class ResolveInputSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=VerdictDecision.choices)
    reason = serializers.CharField(
        allow_blank=True,
        default="",
        max_length=MAX_REASON_CHARS,
        help_text="Required to reject: the actor is told it.",
    )
    answer = serializers.DictField(
        required=False,
        validators=[storable_json("answer")],
        help_text="{condition: label} for each question: true/false, a risk class, or 0-4.",
    )
    approved_calls = serializers.ListField(
        child=serializers.IntegerField(min_value=0, max_value=MAX_POSITION),
        required=False,
        max_length=1000,
        help_text="Positions of the held calls to approve (every held call when left out).",
    )
    edited_arguments = serializers.DictField(
        child=serializers.DictField(),
        required=False,
        validators=[storable_json("edited_arguments")],
        help_text="{position: arguments} replacing an approved call's arguments.",
    )
    risk_labels = serializers.DictField(
        child=serializers.ChoiceField(choices=RiskClass.choices),
        required=False,
        help_text="{position: risk class}: your own class per held call.",
    )
    seen_hashes = serializers.DictField(
        child=serializers.CharField(max_length=128),
        required=False,
        help_text="{position: action_hash} as the detail showed it; required to approve a "
        "held call, so nothing is approved blind.",
    )
    rerun = serializers.BooleanField(
        default=False, help_text="Reject an ambiguous call and run it again."
    )
    end_as = serializers.ChoiceField(
        choices=["failed", "cancelled"],
        required=False,
        default="",
        help_text="How a rejection that ends the run ends it (an uncertain answer, a guardian "
        "failure, injected instructions, a coder/reviewer loop): failed (the default) or "
        "cancelled.",
    )


class EscalationResolveApi(APIView):
    """Approve, reject or answer an escalation through escalation_resolve, the reviewers' page's
    service: the same rules, the same labelled examples, the same move of the run.

    200 with the escalation and its verdict; 202 when a first approval waits for a second,
    different approver (quorum); 400 naming every problem; 409 when it was decided already (the
    first verdict stands)."""

    permission_classes = [HasRequiredPermission]
    required_permission = REVIEW

    @extend_schema(
        request=ResolveInputSerializer,
        responses={
            200: EscalationDetailOutputSerializer,
            202: EscalationDetailOutputSerializer,
            400: ErrorResponse,
            404: ErrorResponse,
            409: ErrorResponse,
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        serializer = ResolveInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        escalation = _escalation_or_404(pk)
        problems = _page_rules(escalation, data)
        if problems:
            raise ValidationError(problems_by_input_field(problems))
        try:
            verdict = escalation_resolve(
                escalation_id=pk,
                reviewer=request.user,
                decision=data["decision"],
                reason=data["reason"],
                answer=data.get("answer"),
                approved_calls=data.get("approved_calls"),
                rerun=data["rerun"],
                edited_arguments=data.get("edited_arguments"),
                risk_labels=data.get("risk_labels"),
                seen_hashes=data.get("seen_hashes"),
                end_as=data["end_as"],
            )
        except AlreadyDecided as decided:
            return _conflict(str(decided))
        except EscalationError as error:
            raise ValidationError(problems_by_input_field(error.problems)) from None
        code = status.HTTP_202_ACCEPTED if verdict is None else status.HTTP_200_OK
        return Response(_detail(pk), status=code)


def _page_rules(escalation: Escalation, data: dict) -> list[str]:
    """What the reviewers' form refuses before the service sees it: approving a held step with
    no call ticked, and approving a call without the hash of what was shown."""
    if escalation.kind != EscalationKind.GATED_STEP or data["decision"] != VerdictDecision.APPROVE:
        return []
    approved = data.get("approved_calls")
    if approved is not None and not approved:
        return ["approved_calls: " + _("name the calls to approve, or reject the step")]
    held = escalation.reason.get("held_calls", [])
    seen = {str(key) for key in (data.get("seen_hashes") or {})}
    missing = [p for p in (held if approved is None else approved) if str(p) not in seen]
    if missing:
        return [
            "seen_hashes: "
            + _(
                "no hash for call %(calls)s; send each call's action_hash from the "
                "escalation's detail"
            )
            % {"calls": ", ".join(map(str, missing))}
        ]
    return []


_INPUT_FIELDS = (
    "decision",
    "reason",
    "answer",
    "approved_calls",
    "edited_arguments",
    "risk_labels",
    "seen_hashes",
    "rerun",
)


def problems_by_input_field(problems: list[str]) -> dict[str, list[str]]:
    """escalation_resolve's problems under the request field each is about ("detail" for the
    item as a whole: its claim, its deadline, the reviewer)."""
    grouped: dict[str, list[str]] = {}
    for problem in problems:
        head = problem.split(":", 1)[0].split(".", 1)[0]
        if head in _INPUT_FIELDS:
            field = head
        elif problem.startswith("arguments of call"):
            field = "edited_arguments"
        elif problem.startswith("call ") and (
            # The words after "call N (tool)" are in the reader's language.
            "changed since" in problem
            or _("changed since you opened it; look at it again") in problem
        ):
            field = "seen_hashes"
        elif problem.startswith("call "):
            field = "approved_calls"
        else:
            field = "detail"
        grouped.setdefault(field, []).append(problem)
    return grouped


def _conflict(message: str) -> Response:
    return Response(error_body(message), status=status.HTTP_409_CONFLICT)


# ---- labelled examples -----------------------------------------------------------------------


class LabelledExampleOutputSerializer(serializers.Serializer):
    example_id = serializers.IntegerField()
    condition = serializers.CharField()
    projection = serializers.JSONField()
    probability = serializers.FloatField(required=False)
    label = serializers.JSONField()
    source = serializers.CharField()
    selection = serializers.ChoiceField(
        choices=ExampleSelection.values,
        help_text="How it was selected for labelling: escalated, audit_sample (a random turn "
        "the policy let through), imported or near_miss.",
    )
    question_set = serializers.CharField()
    model = serializers.CharField()
    reviewer = serializers.CharField(allow_null=True)
    seconds_to_decide = serializers.FloatField(allow_null=True)
    policy_version = serializers.IntegerField(allow_null=True)
    created_at = serializers.CharField()
    escalation_id = serializers.IntegerField(allow_null=True)
    run_id = serializers.IntegerField(allow_null=True)
    turn_id = serializers.IntegerField(allow_null=True)
    verdict = serializers.JSONField(allow_null=True)


EXAMPLE_PARAMETERS = [
    OpenApiParameter("condition", OpenApiTypes.STR, description="A condition's name."),
    OpenApiParameter("source", OpenApiTypes.STR, description="human, judge or import."),
    OpenApiParameter("since", OpenApiTypes.DATE, description="From this local date on."),
    OpenApiParameter("until", OpenApiTypes.DATE, description="Up to this local date, inclusive."),
]


def _example_filters(request: Request, *, also: tuple[str, ...] = ()):
    filters, problems = example_filters_from(
        {name: request.query_params.get(name, "") for name in EXAMPLE_FILTER_FIELDS}
    )
    errors = {field: [message] for field, message in problems.items()}
    for problem in unknown_parameters(request.query_params, (*EXAMPLE_FILTER_FIELDS, *also)):
        errors.setdefault(problem.split(":", 1)[0], []).append(problem)
    if errors:
        raise ValidationError(errors)
    return filters


class LabelledExampleListApi(APIView):
    """Labelled examples in the trace format, newest first, a page at a time, filtered like
    the reviewers' examples page."""

    permission_classes = [HasRequiredPermission]
    required_permission = REVIEW
    pagination_class = BoundedLimitOffsetPagination

    @extend_schema(
        parameters=EXAMPLE_PARAMETERS,
        responses={200: LabelledExampleOutputSerializer(many=True), 400: ErrorResponse},
    )
    def get(self, request: Request) -> Response:
        filters = _example_filters(request, also=_PAGINATION)
        paginator = self.pagination_class()
        page_ids = paginator.paginate_queryset(labelled_example_ids(filters), request, view=self)
        examples = sorted(
            labelled_examples_export(example_ids=page_ids),
            key=lambda example: -example["example_id"],
        )
        return paginator.get_paginated_response(examples)


class LabelledExampleExportApi(APIView):
    """Every labelled example matching the filters as JSON Lines (the trace format), streamed:
    the same bytes as the reviewers' download and `manage.py export_examples`."""

    permission_classes = [HasRequiredPermission]
    required_permission = REVIEW

    @extend_schema(
        parameters=EXAMPLE_PARAMETERS,
        responses={
            (200, "application/x-ndjson"): OpenApiResponse(OpenApiTypes.STR),
            400: ErrorResponse,
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        filters = _example_filters(request)
        response = StreamingHttpResponse(
            labelled_examples_jsonl(filters), content_type="application/x-ndjson"
        )
        name = "-".join(["labelled-examples", *filters.as_params().values()])
        response["Content-Disposition"] = f'attachment; filename="{name}.jsonl"'
        return response
