"""The admins' shadow pages: start a trial of a candidate, see where it decides otherwise."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from guardian_core.roles import manage_policy
from policies import shadow
from policies.models import ShadowTrial

DIFFERENCES_PER_PAGE = 100
STOPPED_SHOWN = 50


def _candidate_choice(raw: str) -> dict:
    """ "policy:3" or "model:2" from the form's select, as shadow_trial_start's arguments."""
    kind, _colon, pk = raw.partition(":")
    if not pk.isdigit():
        return {}
    if kind == "policy":
        return {"policy_version_id": int(pk)}
    if kind == "model":
        return {"guardian_model_version_id": int(pk)}
    return {}


@manage_policy
@require_http_methods(["GET", "POST"])
def shadow_trial_list_page(request: HttpRequest) -> HttpResponse:
    """The trials, running first, and the form that starts one (?candidate=policy:N preselects
    a version, as the version's page links here)."""
    problems: dict[str, list[str]] = {}
    chosen = request.GET.get("candidate", "")
    comment = ""
    if request.method == "POST":
        chosen = request.POST.get("candidate", "")
        comment = request.POST.get("comment", "")
        try:
            trial = shadow.shadow_trial_start(
                **_candidate_choice(chosen), comment=comment, user=request.user
            )
        except ValidationError as error:
            problems = error.message_dict
        else:
            messages.success(
                request,
                _(
                    "Shadow trial of %(candidate)s started: it decides every turn logged from "
                    "now on, beside the real decision, and changes none."
                )
                % {"candidate": trial.candidate_words},
            )
            return redirect("policies:shadow_detail", trial_id=trial.pk)
    versions, models = shadow.shadow_candidates()
    running = list(shadow.shadow_trials().filter(stopped_at__isnull=True))
    stopped = list(shadow.shadow_trials().filter(stopped_at__isnull=False)[:STOPPED_SHOWN])
    for trial in running + stopped:
        trial.summary = shadow.shadow_trial_summary(trial)
    return render(
        request,
        "policies/policy_shadow_list.html",
        {
            "running": running,
            "stopped": stopped,
            "candidate_groups": [
                (
                    _("Policy versions (not active)"),
                    [
                        (f"policy:{v.pk}", _("policy version %(version)s") % {"version": v})
                        for v in versions
                    ],
                ),
                (
                    _("Guardian model versions (not active)"),
                    [
                        (
                            f"model:{m.pk}",
                            _("guardian model %(number)s: %(model_version)s (%(adapter)s)")
                            % {
                                "number": m.number,
                                "model_version": m.model_version,
                                "adapter": m.get_adapter_display(),
                            },
                        )
                        for m in models
                    ],
                ),
            ],
            "chosen": chosen,
            "comment": comment,
            "problems": problems,
        },
        status=400 if problems else 200,
    )


@manage_policy
@require_GET
def shadow_trial_detail_page(request: HttpRequest, trial_id: int) -> HttpResponse:
    """One trial: its counts, the real → candidate outcomes, and the turns that differ, newest
    first, a page of them at a time (?before=<id> for older ones)."""
    trial = get_object_or_404(shadow.shadow_trials(), pk=trial_id)
    differences = shadow.shadow_differences(trial).select_related("run")
    before = request.GET.get("before", "")
    if before.isdigit():
        differences = differences.filter(pk__lt=int(before))
    page = list(differences[: DIFFERENCES_PER_PAGE + 1])
    older = page[-1].pk if len(page) > DIFFERENCES_PER_PAGE else None
    # The link to the next page starts below the last row shown.
    if older is not None:
        page = page[:DIFFERENCES_PER_PAGE]
        older = page[-1].pk
    return render(
        request,
        "policies/policy_shadow_detail.html",
        {
            "trial": trial,
            "summary": shadow.shadow_trial_summary(trial),
            "differences": page,
            "older": older,
            "paged": before.isdigit(),
            # A run's page is an auditor's: an admin without that role would follow a link
            # to a 403, so runs and turns are named, not linked, for them.
            "can_open_runs": request.user.has_perm("runs.audit_run"),
        },
    )


@manage_policy
@require_POST
def shadow_trial_stop_view(request: HttpRequest, trial_id: int) -> HttpResponse:
    trial = get_object_or_404(ShadowTrial, pk=trial_id)
    if shadow.shadow_trial_stop(trial_id=trial.pk, user=request.user):
        messages.success(
            request,
            _("Shadow trial of %(candidate)s stopped.") % {"candidate": trial.candidate_words},
        )
    else:
        messages.info(request, _("This trial had already stopped."))
    return redirect("policies:shadow_detail", trial_id=trial.pk)
