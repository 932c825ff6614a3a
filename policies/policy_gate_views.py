"""The activate page of a policy version: the regression gate's report, the comment the
activation needs and, when the gate refuses, the admin's override reason."""

from datetime import datetime

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import permission_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods

from guardian_core.engine.conditions import Condition
from guardian_core.engine.policy import ON_FIRE, Outcome
from guardian_core.engine.thresholds import Band
from guardian_core.models import PolicyVersion
from policies.policy_gate import gate_report
from policies.services import policy_version_activate

manage_policy = permission_required("guardian_core.manage_policy", raise_exception=True)


@manage_policy
@require_http_methods(["GET", "POST"])
def policy_version_activate_page(request: HttpRequest, version_id: int) -> HttpResponse:
    """GET: the gate's report and the form; POST: activate with the comment (and override
    reason), the gate measured again now rather than trusted from the form."""
    version = get_object_or_404(PolicyVersion, pk=version_id)
    report = gate_report(candidate=version)
    errors: dict[str, list[str]] = {}
    comment = request.POST.get("comment", "")
    override_reason = request.POST.get("override_reason", "")
    if request.method == "POST":
        try:
            policy_version_activate(
                version_id=version.pk,
                comment=comment,
                user=request.user,
                gate_report=report,
                override_reason=override_reason,
            )
        except ValidationError as error:
            # "__all__" cannot be read in a template: the version's own problems go in general.
            errors = {
                ("general" if field == "__all__" else field): problems
                for field, problems in error.message_dict.items()
            }
        else:
            messages.success(
                request,
                _("Policy version %(version)s is active: new runs pin it.") % {"version": version},
            )
            return redirect("policies:detail", version_id=version.pk)
    return render(
        request,
        "policies/policy_activate.html",
        {
            "version": version,
            "report": report,
            "flips": flip_rows(report["flips"], can_open_examples=can_open_examples(request)),
            "flip_counts": flip_counts(report["flips"]),
            "review_share": settings.GUARDIAN_REVIEW_COST_SHARE,
            "rollback_at": _when(report),
            "version_label": f"v{version.number}",
            "shadow_trial": version.shadow_trials.filter(stopped_at__isnull=True).first(),
            "problems": version.problems(),
            "errors": errors,
            "comment": comment,
            "override_reason": override_reason,
        },
        status=400 if errors else 200,
    )


# What a band means for the run, said per condition: "fired" alone does not tell an admin
# whether the run would have stopped, replanned or waited for a person.
_ON_FIRE_WORDS = {
    Outcome.ESCALATE: gettext_lazy("fires: a person decides"),
    Outcome.STOP_FAILURE: gettext_lazy("fires: the run stops (failure)"),
    Outcome.STOP_SUCCESS: gettext_lazy("fires: the run stops (success)"),
    Outcome.REPLAN: gettext_lazy("fires: the actor replans"),
}
_BAND_WORDS = {
    Band.UNCERTAIN: gettext_lazy("uncertain band: a person decides"),
    Band.CLEAR: gettext_lazy("clear: the run goes on"),
    # The guardian model gate's word for an example a guardian could not answer.
    "unscored": gettext_lazy("no usable answer: a person decides"),
}


def _when(report: dict | None) -> datetime | None:
    """The rollback's last activation as a datetime (the report keeps JSON's text)."""
    at = ((report or {}).get("rollback") or {}).get("last_activated_at")
    return datetime.fromisoformat(at) if at else None


def band_words(condition: str, band: str) -> str:
    """What `band` of `condition` does to the run, in words; an unknown value as it is."""
    if band != Band.FIRED:
        return str(_BAND_WORDS.get(band, band))
    try:
        return str(_ON_FIRE_WORDS[ON_FIRE[Condition(condition)]])
    except (ValueError, KeyError):
        return band


def label_words(condition: str, label: object, positive: bool | None) -> str:
    """The reviewer's label in words: whether the condition held (a risk class, a drift score)."""
    if positive is None:
        return ""
    if condition == Condition.RISK:
        if positive:
            return _("%(label)s (needs approval)") % {"label": label}
        return _("%(label)s (may run)") % {"label": label}
    if condition == Condition.DRIFT:
        if positive:
            return _("score %(label)s (lost the goal)") % {"label": label}
        return _("score %(label)s (on goal)") % {"label": label}
    return _("holds") if positive else _("does not hold")


def _judged(condition: str, band: str, positive: bool) -> str:
    """What a band does with an example whose label is known: "right", "caught" (it holds and
    a person sees it), "missed" (it holds and the run goes on unseen), "false alarm" (it does
    not hold and the run stops, replans or escalates) or "a person" (a review in the band)."""
    try:
        escalating = ON_FIRE[Condition(condition)] == Outcome.ESCALATE
    except (ValueError, KeyError):
        escalating = False
    if band == Band.CLEAR:
        # Translators: how an example's outcome stands against its label.
        return _("missed") if positive else _("right")
    if band == Band.FIRED:
        if positive:
            return _("caught") if escalating else _("right")
        return _("false alarm")
    # The uncertain band, or no usable answer: a person decides.
    return _("caught") if positive else _("a person")


def flip_effect(flip: dict) -> tuple[str, str]:
    """What the flip does against the example's label, in words, and whether the example now
    costs less ("better"), more ("worse") or the same ("alike"), priced as the gate prices it
    (a review, a false stop, a miss) at the costs in force."""
    positive = flip.get("positive")
    if positive is None:
        return "", "alike"
    was = _judged(flip["condition"], flip["current"], positive)
    now = _judged(flip["condition"], flip["candidate"], positive)
    cost = flip.get("cost") or {}
    before, after = cost.get("current"), cost.get("candidate")
    if before is None or after is None or abs(after - before) < 1e-12:
        kind = "alike"
    else:
        kind = "better" if after < before else "worse"
    return f"{was} → {now}", kind


def flip_counts(flips: list[dict]) -> dict[str, int]:
    """How many of all the flips cost less, more, or the same."""
    counts = {"better": 0, "worse": 0, "alike": 0}
    for flip in flips:
        counts[flip_effect(flip)[1]] += 1
    return counts


def can_open_examples(request: HttpRequest) -> bool:
    """A flip links to its escalation, a reviewer's page: an admin without that role would
    follow the link to a 403, so the link is only offered to whoever may open it."""
    return request.user.has_perm("escalations.review_escalation")


# A page lists at most this many flips (the report keeps them all): a gate over thousands of
# examples must not become a page of thousands of rows.
FLIPS_SHOWN = 200
PREVIEW_CHARS = 140


def example_previews(example_ids: list[int]) -> dict[int, str]:
    """A line of what each example was about, for an admin who may not open the reviewer's
    page: the call a risk example held, else the first tool output, else the goal. One query."""
    from escalations.models import LabelledExample

    previews = {}
    for pk, projection in LabelledExample.objects.filter(pk__in=example_ids).values_list(
        "pk", "projection"
    ):
        projection = projection if isinstance(projection, dict) else {}
        proposal = projection.get("pending_proposal")
        results = projection.get("last_results") or []
        if isinstance(proposal, dict) and proposal.get("tool"):
            text = _("call %(tool)s: %(arguments)s") % {
                "tool": proposal["tool"],
                "arguments": proposal.get("arguments", {}),
            }
        elif results:
            text = str(results[0])
        else:
            text = str(projection.get("goal", ""))
        previews[pk] = text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"
    return previews


def flip_rows(flips: list[dict], *, can_open_examples: bool) -> list[dict]:
    """The gate's first FLIPS_SHOWN outcome flips as the page shows them: each band in words,
    a line of what the example was about, and the example's link only where the reader may
    follow it."""
    shown = flips[:FLIPS_SHOWN]
    previews = example_previews([flip["example_id"] for flip in shown])
    return [
        {
            **flip,
            "url": flip.get("url") if can_open_examples else None,
            "preview": previews.get(flip["example_id"], ""),
            "label_words": label_words(flip["condition"], flip.get("label"), flip.get("positive")),
            "effect": flip_effect(flip),
            "current_words": band_words(flip["condition"], flip["current"]),
            "candidate_words": band_words(flip["condition"], flip["candidate"]),
        }
        for flip in shown
    ]
