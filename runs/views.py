"""The auditors' pages of runs."""

from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET
from django_htmx.http import HttpResponseStopPolling, push_url

from runs.audit import run_chain_head
from runs.models import DecisionOutcome, Run, RunStatus, Turn
from runs.presentation import run_rows
from runs.replay import turn_not_probeable, turn_not_probeable_as_shown
from runs.selectors import (
    RunListPage,
    run_filters_from,
    run_last_turn,
    run_last_usage,
    run_list_filtered,
    run_page_run,
    run_page_stamp,
    run_policy_numbers,
    run_recent_model_versions,
    run_timeline,
    run_webhook_deliveries,
)
from runs.stop_reasons import STOP_REASONS, stop_reason_text
from runs.timeline import (
    LIVE_STATUSES,
    TurnView,
    budget_rows,
    probability_chart,
    queue_wait_seconds,
    run_first_turn,
    seconds_text,
    status_sentence,
    turn_views,
)
from runs.tools import tool_registry
from runs.validation import ACTORS
from runs.vocabulary import actor_words

# ---- the runs list --------------------------------------------------------------------------

LIST_TEMPLATE = "runs/run_list.html"
LIST_PAGE_SIZE = 50
ESCALATED_CHOICES = (
    ("", gettext_lazy("Any run")),
    ("yes", gettext_lazy("Escalated")),
    ("no", gettext_lazy("Never escalated")),
)
# The text fields the form shows back as typed, a bad value included (it is named above).
LIST_TEXT_FIELDS = ("q", "since", "until", "model", "tool")


@permission_required("runs.audit_run", raise_exception=True)
@require_GET
def run_list_page(request: HttpRequest) -> HttpResponse:
    """Every run, newest first, 50 a page by keyset, under the filters of the form: the whole
    page, or the results alone (problems, rows, pages) for an htmx filter change or page."""
    restoring = bool(request.htmx) and request.htmx.history_restore_request
    filters, problems = run_filters_from(request.GET)
    after = request.GET.get("after") or None
    bad_filters = [p for p in problems if not p.startswith("after:")]
    if bad_filters:
        # A bad filter is named and nothing is listed: the other filters alone would list
        # runs the auditor did not ask for, as if they matched (the API answers 400).
        after, page = None, RunListPage(items=[], next_cursor=None)
    else:
        try:
            page = run_list_filtered(filters=filters, after=after, limit=LIST_PAGE_SIZE)
        except ValueError:  # a stale cursor, named already: the first page, rightly filtered
            after = None
            page = run_list_filtered(filters=filters, limit=LIST_PAGE_SIZE)
    params = filters.as_params()
    context = {
        "filters": filters,
        "problems": problems,
        "bad_filters": bad_filters,
        "rows": run_rows(page.items),
        "after": after,
        "narrowed": bool(params),
        "list_url": _list_url({}),
        "first_page_url": _list_url(params),
        "next_page_url": _list_url(params, after=page.next_cursor) if page.next_cursor else "",
        "looked_back_to": timezone.localtime(page.looked_back_to) if page.looked_back_to else None,
        "time_zone": timezone.get_current_timezone_name(),
    }
    if request.htmx and not restoring:
        template = f"{LIST_TEMPLATE}#results"
    else:
        template = LIST_TEMPLATE
        context.update(
            raw={name: request.GET.get(name, "") for name in LIST_TEXT_FIELDS},
            status_choices=RunStatus.choices,
            actor_choices=[(actor, actor_words(actor, translated=True)) for actor in ACTORS],
            outcome_choices=DecisionOutcome.choices,
            stop_reason_choices=[
                (code, stop_reason_text(code, translated=True)) for code in STOP_REASONS
            ],
            escalated_choices=ESCALATED_CHOICES,
            policy_choices=run_policy_numbers(),
            model_suggestions=run_recent_model_versions(),
            tool_suggestions=sorted(tool_registry()),
        )
    # A whole page under a bad filter is a 400; an htmx swap of the results stays 200, since
    # htmx swaps no 4xx and the problem must show where the auditor typed.
    status = 400 if bad_filters and not request.htmx else 200
    response = render(request, template, context, status=status)
    if request.htmx and not restoring and not problems:
        # The form sends every field, empty ones too; the address bar gets the short form.
        push_url(response, _list_url(params, after=after))
    # The same URL answers a page or its results: a cache must not mix them up.
    patch_vary_headers(response, ("HX-Request",))
    return response


def _list_url(params: dict[str, str], **extra: str | None) -> str:
    query = urlencode({**params, **{name: value for name, value in extra.items() if value}})
    base = reverse("runs:list")
    return f"{base}?{query}" if query else base


# ---- the run page ---------------------------------------------------------------------------

RUN_TEMPLATE = "runs/run_detail.html"


@permission_required("runs.audit_run", raise_exception=True)
@require_GET
def run_detail_page(request: HttpRequest, run_id: int) -> HttpResponse:
    """One run's decision log: the whole page, or its live head (summary, chart, turns) for
    htmx; for the poll of a live run, 204 when nothing changed since its stamp (286, which
    stops the poll, once the run has ended); `?before=<turn>` pages to older turns by keyset."""
    try:
        run = run_page_run(run_id=run_id)
    except Run.DoesNotExist:
        raise Http404("No such run") from None
    last_turn = run_last_turn(run_id=run.pk)
    stamp = run_page_stamp(run, last_turn)
    live = run.status in LIVE_STATUSES
    polled = bool(request.htmx) and "stamp" in request.GET
    if polled and request.GET["stamp"] == stamp:
        return HttpResponse(status=204) if live else HttpResponseStopPolling()
    raw_before = request.GET.get("before", "")
    before, problem = _turn_number(raw_before)
    timeline = run_timeline(run_id=run.pk, before=before)
    turns = turn_views(timeline.turns, run=run)
    versions = sorted({t.guardian_model_version for t in turns if t.guardian_model_version})
    # What the guardian logged it was asked, which may not be the policy version's question
    # set (a guardian may carry its own, engine/loop.py): read off the turns shown, no query.
    question_sets = sorted({t.question_set_version for t in turns if t.question_set_version})
    queued = queue_wait_seconds(run, run_first_turn(run_id=run.pk))
    context = {
        "run": run,
        "status_sentence": status_sentence(run),
        "live": live,
        "problem": problem,
        "before": before,
        "turns": turns,
        "older_url": (
            _run_url(run.pk, before=timeline.older_than) if timeline.older_than is not None else ""
        ),
        "latest_url": _run_url(run.pk),
        "chart": probability_chart(turns),
        "budgets": budget_rows(run, run_last_usage(run_id=run.pk)),
        "queue_wait": seconds_text(queued) if queued is not None else "",
        # Shown on the page itself so an auditor can write it down and compare it later.
        "chain_head": run_chain_head(run),
        "guardian_versions": versions,
        "question_sets": question_sets,
        "last_turn": last_turn,
        # A probe link leads somewhere only where the guardian can be asked again.
        "last_turn_not_probeable": _not_probeable(run, last_turn, turns),
        "is_review_loop": run.actor == "coder_reviewer",
        "can_review": request.user.has_perm("escalations.review_escalation"),
        # Only the head of a live run polls; an older page stays as it is.
        "poll_url": _run_url(run.pk, stamp=stamp) if live and before is None else "",
        "webhook_deliveries": run_webhook_deliveries(run=run),
    }
    # A poll or an htmx page of turns swaps the live head; a Back restore needs the whole page.
    partial = bool(request.htmx) and not request.htmx.history_restore_request
    template = f"{RUN_TEMPLATE}#live" if partial else RUN_TEMPLATE
    response = render(request, template, context)
    # The same URL answers a page or its live head: a cache must not mix them up.
    patch_vary_headers(response, ("HX-Request",))
    return response


def _not_probeable(run: Run, last_turn: Turn | None, turns: list[TurnView]) -> str:
    """Why the run's latest turn cannot be probed ("" when it can): read off the page's own
    turns when it shows it (no query on the live head), else from the log."""
    if last_turn is None:
        return ""
    if turns and turns[0].index == last_turn.index:
        shown = turns[0]
        return turn_not_probeable_as_shown(run=run, decided=bool(shown.outcome), held=shown.held)
    return turn_not_probeable(run=run, turn_id=last_turn.pk)


def _turn_number(raw: str) -> tuple[int | None, str]:
    if not raw:
        return None, ""
    if raw.isascii() and raw.isdigit() and int(raw) < 2**31:
        return int(raw), ""
    return None, "before: " + _("must be a turn number; showing the latest turns")


def _run_url(run_id: int, **params: object) -> str:
    url = reverse("runs:detail", args=[run_id])
    query = urlencode({key: value for key, value in params.items() if value is not None})
    return f"{url}?{query}" if query else url
