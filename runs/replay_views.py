"""The auditors' replay pages: a run's decisions replayed, one turn's decision and guardian
replayed side by side, and the counterfactual probe of a turn. Read-only: nothing here writes.

A module of its own beside runs/views.py (the run pages) and runs/audit_views.py (the chain):
the three screens share one service, runs/replay.py, and no state with the run page.
"""

import json

from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods

from runs.models import Run, Turn
from runs.replay import (
    ProbeEdits,
    ProbeInputError,
    guardian_not_askable,
    guardian_plays_a_script,
    guardian_replay,
    run_replay,
    turn_decision_replay,
    turn_history_shown,
    turn_probe,
)
from runs.replay_parallel import default_workers, parallel_possible, replay_page

REPLAY_PAGE_SIZE = 100
# A page replays at most REPLAY_PAGE_SIZE + 1 turns; what costs is reading every decided turn
# before `?from=` for the state it leaves (~40 µs a turn). Forking the workers and each one's
# new connection cost some tens of milliseconds, so the turns before the page are spread over
# processes only from this many on (about a second of reading in one process).
PARALLEL_PAGE_FROM = 25_000


def _run_or_404(run_id: int) -> Run:
    try:
        return Run.objects.select_related("policy_version").get(pk=run_id)
    except Run.DoesNotExist:
        raise Http404("No such run") from None


def _turn_or_404(run: Run, index: int) -> Turn:
    try:
        return Turn.objects.select_related("decision").get(run_id=run.pk, index=index)
    except Turn.DoesNotExist:
        raise Http404("No such turn") from None


@permission_required("runs.audit_run", raise_exception=True)
@require_GET
def run_replay_page(request: HttpRequest, run_id: int) -> HttpResponse:
    """Every decided turn of the run replayed with `decide`, REPLAY_PAGE_SIZE a page from
    `?from=<turn index>` (keyset): identical, different (and how), or not replayable."""
    run = _run_or_404(run_id)
    raw = request.GET.get("from", "")
    start, problem = 0, ""
    if raw:
        if raw.isascii() and raw.isdigit() and int(raw) < 2**31:
            start = int(raw)
        else:
            problem = "from: " + _("must be a turn number; showing the first turns")
    error = ""
    results = []
    try:
        if start >= PARALLEL_PAGE_FROM and parallel_possible():
            results = replay_page(
                run=run, start_index=start, limit=REPLAY_PAGE_SIZE + 1, workers=default_workers()
            )
        else:
            results = list(run_replay(run=run, start_index=start, limit=REPLAY_PAGE_SIZE + 1))
    except ValueError as exc:  # a policy version stored before versions were validated
        error = _("The run cannot be replayed: %(error)s") % {"error": exc}
    more = len(results) > REPLAY_PAGE_SIZE
    results = results[:REPLAY_PAGE_SIZE]
    base = reverse("runs:replay", args=[run.pk])
    context = {
        "run": run,
        "results": results,
        "problem": problem,
        "error": error,
        "start": start,
        "identical": sum(1 for r in results if r.status == "identical"),
        "different": sum(1 for r in results if r.status == "different"),
        "not_replayable": sum(1 for r in results if r.status == "not_replayable"),
        "next_url": f"{base}?{urlencode({'from': results[-1].turn_index + 1})}" if more else "",
        "first_url": base if start else "",
    }
    return render(request, "runs/run_replay.html", context)


@permission_required("runs.audit_run", raise_exception=True)
@require_GET
def turn_replay_page(request: HttpRequest, run_id: int, index: int) -> HttpResponse:
    """One turn: its decision replayed with `decide`, and, when asked (`?ask=1`: it calls the
    guardian, which may be a paid model), the guardian asked again with the logged
    projection, new vs logged probabilities side by side."""
    run = _run_or_404(run_id)
    turn = _turn_or_404(run, index)
    error = ""
    decision = None
    try:
        decision = turn_decision_replay(run=run, index=turn.index)
    except ValueError as exc:
        error = _("The turn cannot be replayed: %(error)s") % {"error": exc}
    # Offered only where it can work: a turn without a projection says why instead.
    not_askable = guardian_not_askable(run=run, turn=turn)
    asked = request.GET.get("ask") == "1"
    guardian = None
    if asked and not error and not not_askable:
        guardian = guardian_replay(run=run, index=turn.index)
    context = {
        "run": run,
        "turn": turn,
        "decision": decision,
        # Held at the gate: the "gate (fired)" reason is not one of the conditions fired.
        "held": decision is not None
        and any(r.get("source") == "gate" for r in decision.logged_reasons),
        "guardian": guardian,
        "asked": asked,
        "not_askable": not_askable,
        "scripted": guardian_plays_a_script(run),
        "history": turn_history_shown(turn),
        "error": error,
        "ask_url": f"{reverse('runs:turn_replay', args=[run.pk, turn.index])}?ask=1",
        "probe_url": reverse("runs:turn_probe", args=[run.pk, turn.index]),
    }
    return render(request, "runs/turn_replay.html", context)


@permission_required("runs.audit_run", raise_exception=True)
@require_http_methods(["GET", "POST"])
def turn_probe_page(request: HttpRequest, run_id: int, index: int) -> HttpResponse:
    """The counterfactual probe: a form of edits to the turn's logged projection (drop tool
    results, another goal, other arguments for the pending call) and, once edited, each
    condition's logged and new probability and the logged and new outcome. The form is
    POSTed: a goal or arguments of any length would not fit in a URL (a raw 414). It writes
    nothing; a GET with the same fields (an older link) is still read."""
    run = _run_or_404(run_id)
    turn = _turn_or_404(run, index)
    projection = turn.projection or {}
    malformed = not isinstance(projection, dict)
    if malformed:  # an altered log: said, and nothing to edit
        projection = {}
    sent = request.POST if request.method == "POST" else request.GET
    edits, problems = _edits_from(sent, projection)
    if malformed:
        edits, problems = (
            None,
            [_("The turn's logged projection is malformed (the log was altered).")],
        )
    result = None
    if edits is not None and not problems:
        try:
            result = turn_probe(run=run, index=turn.index, edits=edits)
        except ProbeInputError as exc:
            problems = str(exc).split("; ")
        except ValueError as exc:
            problems = [_("The turn cannot be probed: %(error)s") % {"error": exc}]
    context = {
        "run": run,
        "turn": turn,
        "not_askable": guardian_not_askable(run=run, turn=turn),
        "scripted": guardian_plays_a_script(run),
        "result": result,
        "edited": edits is not None and edits.any,
        "problems": problems,
        "results": list(enumerate(projection.get("last_results") or [])),
        "pending": projection.get("pending_proposal"),
        "goal": sent.get("goal", projection.get("goal", "")),
        "arguments": sent.get(
            "arguments",
            json.dumps((projection.get("pending_proposal") or {}).get("arguments", {}), indent=2),
        ),
        "dropped": set(edits.drop_results) if edits else set(),
        "replay_url": reverse("runs:turn_replay", args=[run.pk, turn.index]),
    }
    return render(request, "runs/turn_probe.html", context)


def _edits_from(query, projection: dict) -> tuple[ProbeEdits | None, list[str]]:
    """The probe's edits from the form (None when it was not sent), and a problem per bad
    field. The form sends every field: a goal or arguments count as an edit only when they
    differ from the logged ones; a result counts when ticked."""
    if query.get("probe") != "1":
        return None, []
    problems = []
    drops = []
    for raw in query.getlist("drop_result"):
        if raw.isascii() and raw.isdigit() and int(raw) < 10_000:
            drops.append(int(raw))
        else:
            problems.append(
                "drop_result: " + _("%(value)s is not a result number") % {"value": repr(raw[:20])}
            )
    goal = query.get("goal")
    if goal is not None and goal == projection.get("goal"):
        goal = None
    arguments, has_arguments = None, False
    if query.get("arguments", "").strip():
        try:
            arguments = json.loads(query["arguments"])
        except json.JSONDecodeError as exc:
            problems.append(
                "arguments: "
                + _("not JSON (%(error)s at line %(line)s)")
                % {"error": exc.msg, "line": exc.lineno}
            )
        else:
            logged = (projection.get("pending_proposal") or {}).get("arguments")
            has_arguments = arguments != logged
    return (
        ProbeEdits(
            drop_results=tuple(sorted(set(drops))),
            goal=goal,
            arguments=arguments,
            has_arguments=has_arguments,
        ),
        problems,
    )
