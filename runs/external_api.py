"""The API of runs whose agent loop runs elsewhere: propose a step, report its results, read a
step, wait for a person's verdict. One view per operation, each checking `runs.drive_run` and
that the run is the caller's own (a run another token started is not found)."""

from collections.abc import Mapping

from django.http import Http404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from escalations.models import Escalation
from guardian_core.api import HasRequiredPermission
from runs.external import (
    EXTERNAL,
    MAX_WAIT_SECONDS,
    ExternalError,
    external_escalation_wait,
    external_run_summary,
    external_step_get,
    external_step_propose,
    external_step_results,
)
from runs.models import Run

# Bounds on one step: a model proposes a few calls, never thousands.
MAX_CALLS = 32
MAX_MESSAGE_CHARS = 100_000
# What the user said between two steps: a few messages of chat, not a transcript.
MAX_USER_MESSAGES = 32
MAX_USER_MESSAGE_CHARS = 20_000
MAX_RESULT_CHARS = 1_000_000


class Conflict(APIException):
    status_code = 409
    default_detail = gettext_lazy("conflict")


def _driven_run(request: Request, pk: int) -> Run:
    """The caller's own external run, or 404: a token drives the runs it started."""
    run = Run.objects.select_related("policy_version").filter(pk=pk, actor=EXTERNAL).first()
    if run is None or run.created_by_id != request.user.pk:
        raise Http404
    return run


def _validated(serializer: serializers.Serializer, request: Request, pk: int) -> dict:
    """The body's data, or every problem in it; a run that is not the caller's is not found
    first, as on every other path (the owner is checked here only when the body is bad, so
    a good body still costs one statement)."""
    if not serializer.is_valid():
        _driven_run(request, pk)
        raise ValidationError(serializer.errors)
    return serializer.validated_data


def _raise(error: ExternalError):
    if error.status == 400:
        raise ValidationError(error.problems or {"detail": error.detail})
    if error.status == 404:
        raise Http404(error.detail)
    raise Conflict(error.detail)


class CallInputSerializer(serializers.Serializer):
    tool = serializers.CharField(max_length=120)
    arguments = serializers.JSONField(
        required=False,
        default=dict,
        help_text="An object (or the JSON text a model sent): validated against the tool's "
        "schema, every problem named in the answer.",
    )
    call_id = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    intent = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class _TextField(serializers.CharField):
    """Text as sent: a number or a list is refused, not turned into text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_text", datatype=type(data).__name__)
        return super().to_internal_value(data)

    default_error_messages = {"not_text": "must be text, not {datatype}."}


class UserMessageInputSerializer(serializers.Serializer):
    """One thing the user said. Its only field is `text`: another key is refused, so nothing
    a caller meant to send is dropped unsaid."""

    default_error_messages = {
        "invalid": 'each user message is an object {{"text": "…"}}, not {datatype}.'
    }

    text = _TextField(
        max_length=MAX_USER_MESSAGE_CHARS,
        trim_whitespace=False,
        help_text="What the user said, verbatim (untrusted text: recorded and judged as data). "
        'The history reads "user said: <text>", on one line, cut at 300 characters; the '
        "step's record keeps the whole text.",
    )

    def to_internal_value(self, data):
        # Every problem at once: an unknown key (often a misspelt "text") with the rest.
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, Mapping) else []
        said = _('unknown field: a user message has only "text".')
        problems = {str(key): [said] for key in unknown}
        try:
            value = super().to_internal_value(data)
        except ValidationError as error:
            if not problems:
                raise
            raise ValidationError({**error.detail, **problems}) from None
        if problems:
            raise ValidationError(problems)
        return value


class StepInputSerializer(serializers.Serializer):
    step = serializers.IntegerField(
        min_value=0, help_text="The step's number: 0, then one more after each decided step."
    )
    message = serializers.CharField(
        max_length=MAX_MESSAGE_CHARS, required=False, allow_blank=True, default=""
    )
    calls = CallInputSerializer(many=True, required=False, default=list)
    tokens = serializers.IntegerField(min_value=0, required=False, default=0)
    cost = serializers.FloatField(min_value=0, required=False, default=0.0)
    user_messages = UserMessageInputSerializer(
        many=True,
        required=False,
        default=list,
        help_text="What the user said to the agent since its last step, oldest first (an "
        "answer to a confirmation, a missing detail): written to the run's history before "
        "this step's calls, so the risk check and the guardian read the conversation.",
    )

    def validate_calls(self, calls: list) -> list:
        if len(calls) > MAX_CALLS:
            raise serializers.ValidationError(
                _("at most %(count)s calls in one step") % {"count": MAX_CALLS}
            )
        return calls

    def validate_user_messages(self, messages: list) -> list:
        if len(messages) > MAX_USER_MESSAGES:
            raise serializers.ValidationError(
                _("at most %(count)s user messages in one step") % {"count": MAX_USER_MESSAGES}
            )
        return messages


class ResultInputSerializer(serializers.Serializer):
    position = serializers.IntegerField(min_value=0)
    result = serializers.CharField(
        max_length=MAX_RESULT_CHARS, required=False, allow_blank=True, trim_whitespace=False
    )
    error = serializers.CharField(max_length=10_000, required=False, allow_blank=False)


class ResultsInputSerializer(serializers.Serializer):
    results = ResultInputSerializer(many=True)


class StepAnswerSerializer(serializers.Serializer):
    """The answer to a step (its shape, for the schema; the service builds it)."""

    run = serializers.IntegerField()
    step = serializers.IntegerField()
    status = serializers.ChoiceField(
        choices=["run", "held", "decided", "opening"],
        help_text="run: run exactly the calls whose status is run, then report their results; "
        "held: a person decides first (wait on the escalation); decided: nothing is to run, "
        "the decision says how the run goes on; opening: a request is still checking a "
        "person's approvals of this step (read it again in a moment).",
    )
    calls = serializers.ListField(child=serializers.DictField())
    escalation = serializers.DictField(allow_null=True)
    decision = serializers.DictField(allow_null=True)
    results_url = serializers.CharField()


class RunSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    stop_reason = serializers.CharField(allow_blank=True)
    final_answer = serializers.CharField(allow_null=True)
    next_step = serializers.IntegerField(help_text="The number the next proposed step takes.")
    pending_step = serializers.IntegerField(
        allow_null=True, help_text="A step whose results Guardian waits for."
    )
    escalation = serializers.DictField(allow_null=True, help_text="One waiting on a person.")
    steps_url = serializers.CharField()


class VerdictSerializer(serializers.Serializer):
    escalation = serializers.IntegerField()
    run = serializers.IntegerField()
    step = serializers.IntegerField()
    status = serializers.ChoiceField(choices=["open", "resolved", "expired", "cancelled"])
    decision = serializers.CharField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)
    run_status = serializers.CharField()
    may_continue = serializers.BooleanField()
    feedback = serializers.ListField(child=serializers.DictField())
    released = serializers.ListField(child=serializers.CharField())
    resumed = StepAnswerSerializer(allow_null=True)


class RunStepsApi(APIView):
    """GET: where the run stands (the next step, a step waiting for results, an escalation).
    POST: propose the next step (with what the user said since the last one, if anything);
    the answer says which calls may run (each with its idempotency key), which are invalid
    (every problem) or held for a person."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.drive_run"

    @extend_schema(operation_id="runs_steps_summary", responses={200: RunSummarySerializer})
    def get(self, request: Request, pk: int) -> Response:
        return Response(external_run_summary(_driven_run(request, pk)))

    @extend_schema(
        request=StepInputSerializer,
        responses={200: StepAnswerSerializer, 201: StepAnswerSerializer},
    )
    def post(self, request: Request, pk: int) -> Response:
        data = _validated(StepInputSerializer(data=request.data), request, pk)
        try:
            # The service claims the run with its owner checked, in one statement.
            answer, new = external_step_propose(
                run_id=pk, owner_id=request.user.pk, step=data["step"], body=data
            )
        except ExternalError as error:
            _raise(error)
        return Response(answer, status=201 if new else 200)


class RunStepApi(APIView):
    """A step as Guardian recorded it: its calls, any escalation, its decision once made."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.drive_run"

    @extend_schema(responses={200: StepAnswerSerializer})
    def get(self, request: Request, pk: int, step: int) -> Response:
        try:
            return Response(external_step_get(run=_driven_run(request, pk), step=step))
        except ExternalError as error:
            _raise(error)


class RunStepResultsApi(APIView):
    """Report each call that ran: its verbatim result (or error). Guardian asks the guardian,
    decides, and answers with the outcome, the reasons and what to tell the model; an output
    held back as injected is withheld (null) until a person clears it."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.drive_run"

    @extend_schema(request=ResultsInputSerializer, responses={200: StepAnswerSerializer})
    def post(self, request: Request, pk: int, step: int) -> Response:
        data = _validated(ResultsInputSerializer(data=request.data), request, pk)
        results = [dict(item) for item in data["results"]]
        try:
            answer, new = external_step_results(
                run_id=pk, owner_id=request.user.pk, step=step, results=results
            )
        except ExternalError as error:
            _raise(error)
        return Response(answer, status=200)


def waited_escalation(*, user, pk: int) -> Escalation:
    """An escalation of one of the caller's runs, or 404 (the wait server asks the same)."""
    escalation = Escalation.objects.raised().select_related("run").filter(pk=pk).first()
    if escalation is None or escalation.run.created_by_id != user.pk:
        raise Http404
    return escalation


def wait_timeout(raw: str) -> float:
    """A wait's `timeout` query parameter: seconds, 0 to 30, or a 400 naming the field."""
    try:
        timeout = float(raw)
    except ValueError:
        timeout = -1.0
    if not 0 <= timeout <= MAX_WAIT_SECONDS:
        raise ValidationError(
            {"timeout": [_("a number of seconds, 0 to 30, not %(value)s") % {"value": repr(raw)}]}
        )
    return timeout


class EscalationWaitApi(APIView):
    """Wait for a person's verdict on an escalation of the caller's run: answers as soon as
    there is one, or after `timeout` seconds (at most 30) with status "open". An approved held
    step comes back with `resumed`: the step that runs exactly the approved calls."""

    permission_classes = [HasRequiredPermission]
    required_permission = "runs.drive_run"

    @extend_schema(
        parameters=[OpenApiParameter("timeout", float, description="seconds, 0 to 30")],
        responses={200: VerdictSerializer},
    )
    def get(self, request: Request, pk: int) -> Response:
        escalation = waited_escalation(user=request.user, pk=pk)
        timeout = wait_timeout(request.query_params.get("timeout", "0"))
        return Response(external_escalation_wait(escalation=escalation, timeout=timeout))


# ---- the lean path of the two hot calls -------------------------------------------------------
# An outside loop calls these two endpoints before and after every step of its own: what they
# cost is added to each step. A request that is plainly good (a bearer token of a user who may
# drive runs, a JSON body the input serializers would take as it is) is answered by a plain
# Django view: the token and its permission read in one statement, the body checked by hand,
# the service called and its answer serialised once. Anything else (no token, a session, a
# body with a problem, a value DRF would coerce) goes to the DRF view above, which answers it
# as it always has, every bad field named; the schema documents that view. Nothing is written
# before the lean path has decided to answer, so handing a request over repeats nothing.

_LEAN_ANSWER = object()  # a request the lean path hands to the DRF view


def _text(value, *, max_length: int, blank: bool = True, trim: bool = True):
    """`value` as a CharField would validate it, or _LEAN_ANSWER when it would not (or would
    change it in a way worth DRF's words)."""
    if not isinstance(value, str):
        return _LEAN_ANSWER
    if trim:
        value = value.strip()
    if len(value) > max_length or (not blank and not value):
        return _LEAN_ANSWER
    return value


def _count(value, *, floor: int = 0):
    if type(value) is not int or value < floor:
        return _LEAN_ANSWER
    return value


def _lean_step_body(data) -> dict | None:
    """StepInputSerializer's validated data for a body it takes as it is; None otherwise."""
    if not isinstance(data, dict):
        return None
    body = {
        "step": _count(data.get("step")),
        "message": _text(data.get("message", ""), max_length=MAX_MESSAGE_CHARS),
        "tokens": _count(data.get("tokens", 0)),
        "calls": [],
        "user_messages": [],
    }
    cost = data.get("cost", 0.0)
    body["cost"] = float(cost) if type(cost) in (int, float) and 0 <= cost < 1e300 else _LEAN_ANSWER
    calls, said = data.get("calls", []), data.get("user_messages", [])
    if not isinstance(calls, list) or len(calls) > MAX_CALLS:
        return None
    if not isinstance(said, list) or len(said) > MAX_USER_MESSAGES:
        return None
    for call in calls:
        if not isinstance(call, dict) or "arguments" in call and call["arguments"] is None:
            return None
        body["calls"].append(
            {
                "tool": _text(call.get("tool"), max_length=120, blank=False),
                "arguments": call.get("arguments", {}),
                "call_id": _text(call.get("call_id", ""), max_length=200),
                "intent": _text(call.get("intent", ""), max_length=2000),
            }
        )
    for message in said:
        if not isinstance(message, dict) or set(message) != {"text"}:
            return None
        text = _text(message["text"], max_length=MAX_USER_MESSAGE_CHARS, blank=False, trim=False)
        body["user_messages"].append({"text": text})
    values = [*body.values(), *(v for c in body["calls"] for v in c.values())]
    values += [m["text"] for m in body["user_messages"]]
    return None if any(value is _LEAN_ANSWER for value in values) else body


def _lean_results_body(data) -> list[dict] | None:
    """ResultsInputSerializer's results for a body it takes as it is; None otherwise."""
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return None
    results = []
    for item in data["results"]:
        if not isinstance(item, dict):
            return None
        result = {"position": _count(item.get("position"))}
        if "result" in item:
            result["result"] = _text(item["result"], max_length=MAX_RESULT_CHARS, trim=False)
        if "error" in item:
            result["error"] = _text(item["error"], max_length=10_000, blank=False)
        if any(value is _LEAN_ANSWER for value in result.values()):
            return None
        results.append(result)
    return results


def _lean_json(request) -> object:
    """The request's JSON as BoundedJSONParser reads it, or _LEAN_ANSWER for a body it would
    refuse (or one not sent as JSON)."""
    import io

    from django.core.exceptions import RequestDataTooBig
    from rest_framework.exceptions import ParseError

    from guardian_core.parsers import BoundedJSONParser

    if request.content_type != "application/json":
        return _LEAN_ANSWER
    accept = request.headers.get("Accept", "*/*")
    if not any(kind in accept for kind in ("*/*", "application/*", "application/json")):
        return _LEAN_ANSWER  # DRF's content negotiation answers it (406)
    try:
        body = request.body
        return BoundedJSONParser().parse(
            io.BytesIO(body), parser_context={"encoding": request.encoding}
        )
    except (RequestDataTooBig, ParseError, ValidationError):
        return _LEAN_ANSWER


def _lean_response(answer: dict, status: int, allow: str):
    """The answer as the DRF view renders it (JSONRenderer's settings), serialised once."""
    import json

    from django.http import HttpResponse
    from rest_framework.utils.encoders import JSONEncoder

    content = json.dumps(
        answer, cls=JSONEncoder, ensure_ascii=True, allow_nan=False, separators=(",", ":")
    )
    return HttpResponse(
        content, status=status, content_type="application/json", headers={"Allow": allow}
    )


def _lean_error(error: ExternalError, allow: str):
    """An ExternalError as the DRF view answers it (_raise, then the exception handler)."""
    from guardian_core.api import error_body

    if error.status == 400:
        return _lean_response(error_body(error.problems or {"detail": error.detail}), 400, allow)
    return _lean_response(error_body({"detail": error.detail}), error.status, allow)


def _lean(drf_view, answer_with):
    """The URL's view: `answer_with(request, user_id, data, **kwargs)` on the lean path, the DRF
    view `drf_view` for every request it does not take. Carries the DRF view's class, so the
    schema still documents the endpoint, and its 403 and CSRF checks for what it hands over."""
    from django.contrib.auth.decorators import login_not_required
    from django.db import OperationalError
    from django.views.decorators.csrf import csrf_exempt

    from guardian_core.api import exception_handler
    from guardian_core.authentication import token_holder

    view_class = drf_view.cls
    allow = ", ".join(view_class().allowed_methods)

    def view(request, **kwargs):
        if request.method != "POST":
            return drf_view(request, **kwargs)
        data = _lean_json(request)
        if data is _LEAN_ANSWER:
            return drf_view(request, **kwargs)
        user_id = token_holder(request, view_class.required_permission)
        if user_id is None:
            return drf_view(request, **kwargs)
        try:
            answered = answer_with(request, user_id, data, **kwargs)
        except ExternalError as error:
            return _lean_error(error, allow)
        except OperationalError as exc:  # a lost race or a database that does not answer
            handled = exception_handler(exc, {})
            if handled is None:
                raise
            response = _lean_response(handled.data, handled.status_code, allow)
            for header in ("Retry-After",):
                if header in handled:
                    response[header] = handled[header]
            return response
        if answered is None:
            return drf_view(request, **kwargs)
        answer, status = answered
        return _lean_response(answer, status, allow)

    for name in ("cls", "initkwargs", "view_class", "view_initkwargs"):
        if hasattr(drf_view, name):
            setattr(view, name, getattr(drf_view, name))
    view.__name__ = drf_view.__name__
    view.__doc__ = drf_view.__doc__
    return login_not_required(csrf_exempt(view))


def _steps_lean(request, user_id: int, data, *, pk: int):
    body = _lean_step_body(data)
    if body is None:
        return None
    answer, new = external_step_propose(run_id=pk, owner_id=user_id, step=body["step"], body=body)
    return answer, 201 if new else 200


def _results_lean(request, user_id: int, data, *, pk: int, step: int):
    results = _lean_results_body(data)
    if results is None:
        return None
    answer, _new = external_step_results(run_id=pk, owner_id=user_id, step=step, results=results)
    return answer, 200


def run_steps_view():
    """GET and POST /api/runs/<pk>/steps/: the POST's common request on the lean path."""
    from guardian_core.api import api_view

    return _lean(api_view(RunStepsApi), _steps_lean)


def run_step_results_view():
    """POST /api/runs/<pk>/steps/<step>/results/: its common request on the lean path."""
    from guardian_core.api import api_view

    return _lean(api_view(RunStepResultsApi), _results_lean)
