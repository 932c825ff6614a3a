"""The reviewers' pages (the escalation queue, the decision pane, labelled examples) and the admins'
page of the reviewers' guidance."""

from dataclasses import fields

from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, push_url, trigger_client_event

from escalations.claims import (
    escalation_claim,
    escalation_claim_next,
    escalation_extend_deadline,
    escalation_release,
)
from escalations.decision_form import decision_initial, decision_input, problems_in_form_order
from escalations.decision_pane import DecisionPane, escalation_pane
from escalations.errors import EscalationError
from escalations.examples import (
    EXAMPLE_FILTER_FIELDS,
    example_filters_from,
    labelled_examples_count,
    labelled_examples_jsonl,
    reviewer_stats,
)
from escalations.guidance import review_guidance_delete, review_guidance_list, review_guidance_save
from escalations.guidance_form import ReviewGuidanceForm
from escalations.held_calls import approval_edits
from escalations.models import (
    AUDIT_OUTCOME,
    VERDICT_REASON_MAX_CHARS,
    Approval,
    Escalation,
    EscalationKind,
    EscalationStatus,
    ExampleSource,
    ReviewGuidance,
    Verdict,
)
from escalations.presentation import bulk_lines, bulk_summary, queue_rows
from escalations.queue import (
    QUEUE_CONDITIONS,
    QueueFilters,
    QueuePage,
    escalation_counts_by_kind,
    escalation_held_by,
    escalation_queue,
    escalation_queue_stamp,
    next_item_passed_over,
    queue_filters_from,
)
from escalations.verdicts import AlreadyDecided, escalation_resolve, escalation_resolve_bulk
from guardian_core.engine.conditions import DRIFT_SCORES, Condition
from runs.models import RiskClass

# ---- the queue ------------------------------------------------------------------

QUEUE_TEMPLATE = "escalations/escalation_queue.html"
QUEUE_PAGE_SIZE = 50
HOLDER_CHOICES = (
    # Translators: the queue's holder filter: items held by anyone.
    ("", pgettext_lazy("holder filter", "Everyone's")),
    ("unclaimed", gettext_lazy("Unclaimed")),
    # Translators: the queue's holder filter: items held by me.
    ("mine", pgettext_lazy("holder filter", "Mine")),
)
SORT_CHOICES = (
    ("urgent", gettext_lazy("Most urgent")),
    ("deadline", gettext_lazy("Nearest deadline")),
    ("oldest", gettext_lazy("Oldest")),
)
BULK_DECISIONS = ("approve", "reject")


@permission_required("escalations.review_escalation", raise_exception=True)
@require_GET
def escalation_queue_page(request: HttpRequest) -> HttpResponse:
    """The queue: the whole page; the listing (counts, filters, rows) for an htmx filter
    change; the rows alone for the live poll, or 204 when nothing changed since its stamp."""
    polled = bool(request.htmx) and "stamp" in request.GET
    restoring = bool(request.htmx) and request.htmx.history_restore_request
    stamp = _page_stamp()
    if polled and request.GET["stamp"] == stamp:
        return HttpResponse(status=204)
    filters, problems = queue_filters_from(request.GET)
    after = request.GET.get("after") or None
    bad_filters = [p for p in problems if not p.startswith("after:")]
    if bad_filters:
        # A bad filter is named and nothing is listed: the rest of the filters alone would
        # list items the reviewer did not ask for, under a heading that says they did.
        after, page = None, QueuePage(items=[], next_cursor=None)
    else:
        try:
            page = escalation_queue(
                reviewer=request.user, filters=filters, after=after, limit=QUEUE_PAGE_SIZE
            )
        except ValueError:  # a stale cursor, named already: the first page, rightly filtered
            after = None
            page = escalation_queue(reviewer=request.user, filters=filters, limit=QUEUE_PAGE_SIZE)
    params = _filter_params(filters)
    context = {
        "filters": filters,
        "filter_params": params,
        "raw": {name: request.GET.get(name, "") for name in ("tool", "run")},
        "problems": problems,
        "page": page,
        "rows": queue_rows(page.items, viewer=request.user),
        "time_zone": timezone.get_current_timezone_name(),
        "after": after,
        "first_page_url": _queue_url(params),
        # An empty list under filters says so and offers the way back (the sort stays).
        "narrowed": any(name != "sort" for name in params),
        "unfiltered_url": _queue_url({k: v for k, v in params.items() if k == "sort"}),
        "next_page_url": _queue_url(params, after=page.next_cursor),
        # Under a bad filter the list stays empty: nothing to poll for.
        "poll_url": "" if bad_filters else _queue_url(params, after=after, stamp=stamp),
        "bad_filters": bad_filters,
    }
    context.update(_listing_context(filters, params))
    if polled:
        template = f"{QUEUE_TEMPLATE}#rows"
        # The counts per kind ride along out of band: they move with the rows (arrivals,
        # verdicts here or elsewhere) and would otherwise stay stale until a reload.
        context["oob"] = True
    elif request.htmx and not restoring:
        template = f"{QUEUE_TEMPLATE}#listing"
    else:
        template = QUEUE_TEMPLATE
        context["reviewer_stats"] = reviewer_stats(request.user)
    # A whole page under a bad filter is a 400 (as the examples page); an htmx listing stays
    # 200, since htmx swaps no 4xx and the reviewer must see the problem where they typed.
    status = 400 if bad_filters and not request.htmx else 200
    response = render(request, template, context, status=status)
    if request.htmx and not polled and not restoring and not problems:
        # The form sends every field, empty ones too; the address bar gets the short form.
        push_url(response, _queue_url(params, after=after))
    # The same URL answers a page, a listing or rows: a cache must not mix them up.
    patch_vary_headers(response, ("HX-Request",))
    return response


@permission_required("escalations.review_escalation", raise_exception=True)
@require_POST
def escalation_next(request: HttpRequest) -> HttpResponse:
    """Claim the most urgent unclaimed item under the queue's filters and open it."""
    filters, problems = queue_filters_from(request.POST)
    back = _queue_url(_filter_params(filters))
    if problems:
        for problem in problems:
            messages.error(request, problem)
        return redirect(back)
    held_before = escalation_held_by(request.user)
    claim = escalation_claim_next(reviewer=request.user, filters=filters)
    if claim.status == "claimed" and claim.escalation is not None:
        # Not the first item the queue shows: the item page says why, or "n" looks broken.
        why = next_item_passed_over(
            reviewer=request.user,
            filters=filters,
            opened=claim.escalation.pk,
            held_before=held_before,
        )
        if why:
            messages.info(request, why)
        return redirect("escalations:detail", claim.escalation.pk)
    # The sort changes no answer here; any other filter may be why nothing is left.
    filtered = any(name != "sort" for name in _filter_params(filters))
    messages.info(request, _nothing_to_claim(filtered=filtered))
    return redirect(back)


def _nothing_to_claim(*, filtered: bool) -> str:
    if filtered:
        return _("Nothing left to claim under these filters.")
    if not sum(escalation_counts_by_kind().values()):
        return _("Nothing left to claim: nothing waits for a reviewer.")
    return _(
        "Nothing left to claim: every open item is held by another reviewer "
        "or was skipped by you a moment ago."
    )


@permission_required("escalations.review_escalation", raise_exception=True)
@require_POST
def escalation_bulk(request: HttpRequest) -> HttpResponse:
    """Approve or reject the ticked items, each its own verdict; report each item's outcome."""
    filters, _ignored = queue_filters_from(request.POST)
    params = _filter_params(filters)
    ids, problems = _escalation_ids(request.POST.getlist("escalation"))
    decision = request.POST.get("decision", "")
    reason = request.POST.get("reason", "")
    if decision not in BULK_DECISIONS:
        problems.append("decision: " + _("choose Approve selected or Reject selected"))
    elif decision == "reject" and not reason.strip():
        # Said once here rather than once per item by each refused verdict.
        problems.append("reason: " + _("a rejection needs a reason the actor can act on"))
    lines = []
    if not problems:
        try:
            outcomes = escalation_resolve_bulk(
                escalation_ids=ids, reviewer=request.user, decision=decision, reason=reason
            )
        except EscalationError as error:
            problems = list(error.problems) or [str(error)]
        else:
            lines = bulk_lines(outcomes)
    if request.htmx:
        context = {
            "problems": problems,
            "lines": lines,
            "summary": bulk_summary(lines, decision),
            "decision_label": _("Approve") if decision == "approve" else _("Reject"),
        }
        if lines:
            # The counts per kind and the reviewer's own stats moved: they come along out of
            # band, so nothing on the page stays stale until a reload.
            context.update(
                _listing_context(filters, params),
                reviewer_stats=reviewer_stats(request.user),
                oob=True,
            )
        response = render(request, f"{QUEUE_TEMPLATE}#bulk_results", context)
        if lines:
            # The rows' poll listens for this: decided items leave the list at once.
            trigger_client_event(response, "queue-changed")
        return response
    for problem in problems:
        messages.error(request, problem)
    level = {"decided": messages.SUCCESS, "waiting": messages.INFO, "refused": messages.ERROR}
    for line in lines:
        messages.add_message(request, level[line.state], line.text)
    return redirect(_queue_url(params))


def _escalation_ids(raw: list[str]) -> tuple[list[int], list[str]]:
    ids = [int(value) for value in raw if value.isascii() and value.isdigit()]
    problems = []
    if len(ids) != len(raw):
        problems.append("escalation: " + _("each selected item must be an escalation number"))
    elif not ids:
        problems.append("escalation: " + _("select at least one item (x ticks the focused one)"))
    return list(dict.fromkeys(ids)), problems


def _listing_context(filters: QueueFilters, params: dict[str, str]) -> dict:
    counts = escalation_counts_by_kind()
    without_kind = {name: value for name, value in params.items() if name != "kind"}
    return {
        "total": sum(counts.values()),
        "all_kinds_url": _queue_url(without_kind),
        "kinds": [
            {
                "value": kind.value,
                "label": kind.label,
                "count": counts.get(kind.value, 0),
                "url": _queue_url({**without_kind, "kind": kind.value}),
                "current": filters.kind == kind.value,
            }
            for kind in EscalationKind
        ],
        "condition_choices": QUEUE_CONDITIONS,
        "holder_choices": HOLDER_CHOICES,
        "sort_choices": SORT_CHOICES,
    }


def _filter_params(filters: QueueFilters) -> dict[str, str]:
    """The filters that differ from the defaults, as query parameters: the queue's canonical,
    shareable address."""
    defaults = QueueFilters()
    return {
        field.name: str(getattr(filters, field.name))
        for field in fields(filters)
        if getattr(filters, field.name) != getattr(defaults, field.name)
    }


def _queue_url(params: dict[str, str], **extra: str | None) -> str:
    query = urlencode({**params, **{name: value for name, value in extra.items() if value}})
    base = reverse("escalations:queue")
    return f"{base}?{query}" if query else base


def _page_stamp() -> str:
    # The queue's stamp moves with every arrival, claim and verdict; the minute makes the
    # rows' countdowns and ages refresh too, without a poll ever re-rendering for nothing.
    return f"{escalation_queue_stamp()}.{int(timezone.now().timestamp() // 60)}"


# ---- labelled examples and the reviewer's own stats ------------------------------


@permission_required("escalations.review_escalation", raise_exception=True)
@require_GET
def labelled_examples_page(request: HttpRequest) -> HttpResponse:
    """The labelled examples: filters, how many match, the reviewer's own stats, and the
    JSON Lines download of the same filters. Bad filters are named on the page (400)."""
    filters, problems = example_filters_from(request.GET)
    context = {
        "values": {name: request.GET.get(name, "") for name in EXAMPLE_FILTER_FIELDS},
        "problems": problems,
        "condition_choices": [c.value for c in Condition],
        "source_choices": ExampleSource.choices,
        "stats": reviewer_stats(request.user),
    }
    if not problems:
        query = urlencode(filters.as_params())
        base = reverse("escalations:examples_jsonl")
        context["count"] = labelled_examples_count(filters)
        context["download_url"] = f"{base}?{query}" if query else base
    return render(request, "escalations/examples.html", context, status=400 if problems else 200)


@permission_required("escalations.review_escalation", raise_exception=True)
@require_GET
def labelled_examples_download(request: HttpRequest) -> HttpResponse:
    """The examples as JSON Lines (the trace format), streamed: the same bytes as
    `manage.py export_examples` with the same filters."""
    filters, problems = example_filters_from(request.GET)
    if problems:
        return HttpResponse(
            "".join(f"{field}: {problem}\n" for field, problem in problems.items()),
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    response = StreamingHttpResponse(
        labelled_examples_jsonl(filters), content_type="application/x-ndjson"
    )
    # Only validated values reach the name: a condition, a source, ISO dates.
    name = "-".join(["labelled-examples", *filters.as_params().values()])
    response["Content-Disposition"] = f'attachment; filename="{name}.jsonl"'
    return response


# ---- the decision pane: one escalation, claimed on open, decided in place --------------------


# What the run does after a verdict, as the confirmation says it.
# Translators: each completes "The run …".
OUTCOME_TEXT = {
    "continue": gettext_lazy("continues with its next turn"),
    "replan": gettext_lazy("replans from its goal"),
    "stop_success": gettext_lazy("stops: succeeded"),
    "stop_failure": gettext_lazy("stops: failed"),
    "stop_cancelled": gettext_lazy("stops: cancelled"),
    AUDIT_OUTCOME: gettext_lazy("is not changed: an audit answer labels the turn, nothing more"),
}
# An MCP session's run goes on only when its client calls again (mcp_gateway/guarding.py): a
# call still held hears the verdict at once, a later one is the client's next call. A new session
# is a new run: the same session's client is the only one that can carry this run on.
MCP_CONTINUE_TEXT = gettext_lazy(
    "goes on when its MCP client calls again in the same session (a call still waiting hears"
    " this now)"
)
MCP_RECORDED_CONTINUE_TEXT = gettext_lazy("went on with its MCP client's next call")
DECIDED = {
    "approve": pgettext_lazy("verdict", "Approved"),
    "reject": pgettext_lazy("verdict", "Rejected"),
    "answer": pgettext_lazy("verdict", "Answered"),
}
# What the run did after a verdict given earlier, as a decided item's record says it. A run
# that had already ended (cancelled meanwhile) is said so instead of a made-up outcome.
# Translators: each completes "The run …".
RECORDED_OUTCOME_TEXT = {
    "continue": gettext_lazy("went on with its next turn"),
    "replan": gettext_lazy("replanned from its goal"),
    "stop_success": gettext_lazy("stopped: succeeded"),
    "stop_failure": gettext_lazy("stopped: failed"),
    "stop_cancelled": gettext_lazy("stopped: cancelled"),
    AUDIT_OUTCOME: gettext_lazy("was not changed: an audit answer labels the turn, nothing more"),
    "cancelled": gettext_lazy("had been cancelled already"),
    "succeeded": gettext_lazy("had ended already: succeeded"),
    "failed": gettext_lazy("had ended already: failed"),
}


def _pane_or_404(escalation_id: int) -> DecisionPane:
    try:
        return escalation_pane(escalation_id=escalation_id)
    except Escalation.DoesNotExist:
        raise Http404("No such escalation") from None


def _pane_state(pane: DecisionPane, user) -> str:
    """What the action area offers: "decide", "held" (by someone else), "waiting" (this
    reviewer's approval is in, a second approver is needed) or "closed"."""
    escalation, now = pane.escalation, timezone.now()
    if escalation.status != EscalationStatus.OPEN:
        return "closed"
    if (
        escalation.claimed_by_id not in (None, user.pk)
        and escalation.claim_expires_at is not None
        and escalation.claim_expires_at > now
    ):
        return "held"
    if any(
        a.reviewer_id == user.pk and a.used_at is None and a.expires_at > now
        for held in pane.held_calls
        for a in held.call.approvals
    ):
        return "waiting"
    return "decide"


def _pane_response(
    request: HttpRequest,
    pane: DecisionPane,
    *,
    form=None,
    done=None,
    notice: str = "",
    whole: bool = False,
) -> HttpResponse:
    """The whole page, or only its action area for an htmx action (a fragment, always 200, so
    that htmx swaps a refusal in place like a success)."""
    form = form or decision_initial(pane)
    problems = problems_in_form_order(form.problems, pane)
    invalid = {problem.field for problem in problems}
    state = _pane_state(pane, request.user)
    verdict = pane.verdict
    question_texts = {question.condition: question.text for question in pane.questions}
    mcp = (pane.run.config or {}).get("mcp")
    context = {
        "pane": pane,
        # An MCP session's run: who gets outputs and verdicts is its client, not a worker's actor.
        "mcp": mcp,
        "receiver": _("the MCP client") if mcp else _("the actor"),
        "escalation": pane.escalation,
        "state": state,
        # n is "next item" only while nothing is left to decide here (see decision.js).
        "form_open": state == "decide" and not done,
        "form": form,
        "problems": problems,
        "call_rows": [
            {
                "call": held.call,
                "approved": held.call.position in form.approved,
                "approve_invalid": f"approve_{held.call.position}" in invalid,
                "risk": form.risk.get(held.call.position, held.default_risk),
                "risk_invalid": f"risk_{held.call.position}" in invalid,
                "guardian_risk": held.call.guardian_risk,
                "arguments": form.arguments.get(held.call.position, held.arguments_json),
                "edited": form.arguments.get(held.call.position, held.arguments_json)
                != held.arguments_json,
                "problem": f"arguments_{held.call.position}" in invalid,
            }
            for held in pane.held_calls
        ],
        "question_rows": [
            {
                "question": question,
                "typed": form.answers.get(question.condition, ""),
                "problem": form.problem_about(f"answer.{question.condition}:"),
            }
            for question in pane.questions
        ],
        "reason_invalid": "reason" in invalid,
        "rerun_invalid": "rerun" in invalid,
        # y and n select for the reviewer only when there is one yes-or-no question.
        "single_question": len(pane.questions) == 1 and pane.questions[0].kind == "yes_no",
        # A decided item's record: what was approved, the answers with their questions, and
        # what the run did next, as sentences.
        "verdict_calls": [
            _("call %(position)s (%(tool)s)")
            % {"position": held.call.position, "tool": held.call.tool}
            for held in pane.held_calls
            if verdict and held.call.position in verdict.approved_calls
        ],
        "verdict_approved": verdict.approved_calls if verdict else [],
        # What the approvers changed in the calls that ran, said as the run page says it.
        "verdict_edits": [
            edit["words"]
            for edit in approval_edits(a for held in pane.held_calls for a in held.call.approvals)
            if verdict and edit["position"] in verdict.approved_calls
        ],
        "verdict_answers": [
            (condition, question_texts.get(condition, ""), label)
            for condition, label in pane.verdict_answers
        ],
        "verdict_outcome": _recorded_outcome_text(
            verdict.resulting_outcome if verdict else "", mcp=bool(mcp)
        ),
        "done": done,
        "done_title": DECIDED.get(getattr(done, "decision", ""), ""),
        "done_calls": [
            _("call %(position)s (%(tool)s)")
            % {"position": held.call.position, "tool": held.call.tool}
            for held in pane.held_calls
            if held.call.position in getattr(done, "approved_calls", [])
        ],
        "done_outcome": _outcome_text(getattr(done, "resulting_outcome", ""), mcp=bool(mcp)),
        "notice": notice,
        "risk_classes": RiskClass.choices,
        "drift_scores": DRIFT_SCORES,
        "reason_max_chars": f"{VERDICT_REASON_MAX_CHARS:,}".replace(",", " "),
    }
    template = "escalations/escalation_detail.html"
    if request.htmx and not whole:
        template += "#actions"
    return render(request, template, context)


@permission_required("escalations.review_escalation", raise_exception=True)
@require_GET
def escalation_detail_page(request: HttpRequest, escalation_id: int) -> HttpResponse:
    """Opening an item claims it; someone else's live claim is shown, not taken. A reviewer
    whose approval waits for a second approver (quorum) only looks: claiming it would keep
    the second approver out."""
    if not Escalation.objects.filter(pk=escalation_id).exists():
        raise Http404("No such escalation")
    waiting = Approval.objects.filter(
        escalation_id=escalation_id,
        reviewer=request.user,
        used_at__isnull=True,
        expires_at__gt=timezone.now(),
    )
    if not waiting.exists():
        escalation_claim(escalation_id=escalation_id, reviewer=request.user)
    # Always the whole page, for htmx too (a Back restore asks for the page it left).
    return _pane_response(request, _pane_or_404(escalation_id), whole=True)


@permission_required("escalations.review_escalation", raise_exception=True)
@require_POST
def escalation_decide(request: HttpRequest, escalation_id: int) -> HttpResponse:
    """Approve, reject or answer through escalation_resolve; every refusal comes back in place
    with what the reviewer typed."""
    pane = _pane_or_404(escalation_id)
    form = decision_input(request.POST, pane)
    if form.problems:
        return _pane_response(request, pane, form=form)
    try:
        verdict = escalation_resolve(
            escalation_id=escalation_id, reviewer=request.user, **form.resolve
        )
    except AlreadyDecided:
        # A second tab, a retry: the first verdict stands and this one says so.
        return _pane_response(request, _pane_or_404(escalation_id), notice="already_decided")
    except EscalationError as error:
        form.problems = _problems(error)
        return _pane_response(request, _pane_or_404(escalation_id), form=form)
    done = verdict or "waiting"
    if not request.htmx:
        # Post/redirect/get: a reload shows the verdict instead of sending it again.
        mcp = bool((pane.run.config or {}).get("mcp"))
        messages.success(request, _decided_message(verdict, mcp=mcp))
        return redirect("escalations:detail", escalation_id=escalation_id)
    return _pane_response(request, _pane_or_404(escalation_id), done=done)


def _problems(error: EscalationError) -> list[str]:
    return list(error.problems) or [str(error)]


def _decided_message(verdict: Verdict | None, *, mcp: bool = False) -> str:
    if verdict is None:
        return _("Recorded — waiting for a second approver.")
    outcome = _outcome_text(verdict.resulting_outcome, mcp=mcp)
    return _("%(decided)s. The run %(outcome)s.") % {
        "decided": DECIDED[verdict.decision],
        "outcome": outcome,
    }


def _outcome_text(outcome: str, *, mcp: bool = False) -> str:
    if mcp and outcome == "continue":
        return str(MCP_CONTINUE_TEXT)
    if outcome in OUTCOME_TEXT:
        return str(OUTCOME_TEXT[outcome])
    # Translators: completes "The run …"; outcome is a code such as "cancelled".
    return _("is %(outcome)s") % {"outcome": outcome} if outcome else _("goes on")


def _recorded_outcome_text(outcome: str, *, mcp: bool = False) -> str:
    if mcp and outcome == "continue":
        return str(MCP_RECORDED_CONTINUE_TEXT)
    if outcome in RECORDED_OUTCOME_TEXT:
        return str(RECORDED_OUTCOME_TEXT[outcome])
    # Translators: completes "The run …"; outcome is a code such as "cancelled".
    return _("was %(outcome)s") % {"outcome": outcome} if outcome else ""


@permission_required("escalations.review_escalation", raise_exception=True)
@require_POST
def escalation_skip(request: HttpRequest, escalation_id: int) -> HttpResponse:
    """Back to the queue, the item released for someone else (a reason is optional)."""
    get_object_or_404(Escalation.objects.only("pk"), pk=escalation_id)
    try:
        escalation_release(
            escalation_id=escalation_id,
            reviewer=request.user,
            note=request.POST.get("reason", "").strip(),
            skipped=True,
        )
    except EscalationError as error:
        pane = _pane_or_404(escalation_id)
        form = decision_initial(pane)
        form.problems = _problems(error)
        return _pane_response(request, pane, form=form)
    messages.info(
        request,
        _("Skipped escalation %(id)s: it is back in the queue.") % {"id": escalation_id},
    )
    if request.htmx:
        return HttpResponseClientRedirect(reverse("escalations:queue"))
    return redirect("escalations:queue")


@permission_required("escalations.review_escalation", raise_exception=True)
@require_POST
def escalation_extend(request: HttpRequest, escalation_id: int) -> HttpResponse:
    """The holder pushes the deadline back once."""
    get_object_or_404(Escalation.objects.only("pk"), pk=escalation_id)
    try:
        escalation_extend_deadline(escalation_id=escalation_id, reviewer=request.user)
    except EscalationError as error:
        pane = _pane_or_404(escalation_id)
        form = decision_initial(pane)
        form.problems = _problems(error)
        return _pane_response(request, pane, form=form)
    pane = _pane_or_404(escalation_id)
    if not request.htmx:
        messages.success(request, _("Deadline extended."))
        return redirect("escalations:detail", escalation_id=escalation_id)
    return _pane_response(request, pane, notice="extended")


# ---- the reviewers' guidance, written by admins (/guidance/) --------------------------------

manage_guidance = permission_required("escalations.change_reviewguidance", raise_exception=True)


@manage_guidance
@require_http_methods(["GET", "POST"])
def review_guidance_page(request: HttpRequest) -> HttpResponse:
    """Every piece of guidance, and a form that adds one."""
    form = ReviewGuidanceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        saved = review_guidance_save(guidance=None, **_guidance_fields(form))
        messages.success(
            request,
            _("Added %(guidance)s: reviewers see it from their next page load.")
            % {"guidance": saved},
        )
        return redirect("guidance:list")
    return render(
        request,
        "escalations/review_guidance.html",
        {"form": form, "guidance": review_guidance_list()},
        status=400 if form.errors else 200,
    )


@manage_guidance
@require_http_methods(["GET", "POST"])
def review_guidance_edit_page(request: HttpRequest, guidance_id: int) -> HttpResponse:
    guidance = get_object_or_404(ReviewGuidance, pk=guidance_id)
    form = ReviewGuidanceForm(request.POST or None, instance=guidance)
    if request.method == "POST" and form.is_valid():
        saved = review_guidance_save(guidance=guidance, **_guidance_fields(form))
        messages.success(request, _("Saved %(guidance)s.") % {"guidance": saved})
        return redirect("guidance:list")
    return render(
        request,
        "escalations/review_guidance_edit.html",
        {"form": form, "guidance": guidance},
        status=400 if form.errors else 200,
    )


@manage_guidance
@require_POST
def review_guidance_delete_view(request: HttpRequest, guidance_id: int) -> HttpResponse:
    if review_guidance_delete(guidance_id=guidance_id):
        messages.success(request, _("Guidance removed."))
    return redirect("guidance:list")


def _guidance_fields(form: ReviewGuidanceForm) -> dict:
    return {name: form.cleaned_data[name] for name in ("condition", "tool", "text")}
