"""The admins' pages for guardian model versions: the list, one version's held-out figures and
activation history, and its activate page (the regression gate's report, a comment and, when
the gate refuses, an override reason)."""

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseStopPolling

from escalations.models import PEOPLES_SOURCES, LabelledExample
from guardian_core.engine.conditions import Condition
from guardian_core.models import (
    GuardianAdapter,
    GuardianModelKind,
    GuardianModelVersion,
    PolicyVersion,
)
from guardian_core.roles import manage_policy
from policies.guardian_gate import guardian_model_gate_report
from policies.learning import (
    GuardianGateRefused,
    LearningError,
    guardian_model_activate,
    guardian_model_deactivate,
    guardian_model_job_problems,
    guardian_model_job_start,
)
from policies.models import GuardianModelJob, GuardianModelJobKind, GuardianModelJobStatus
from policies.policy_gate_views import _when, can_open_examples, flip_counts, flip_rows

# The list shows the newest versions: each is made by an admin's command or action, so a few
# hundred is years of work; the cap keeps the page one query of bounded size whatever happens.
LIST_LIMIT = 200


def guardian_model_version_list() -> list[GuardianModelVersion]:
    """The newest LIST_LIMIT versions, with who made them and what each sits on (its
    `kind_words`)."""
    versions = list(
        GuardianModelVersion.objects.select_related("created_by", "over").order_by("-number")[
            :LIST_LIMIT
        ]
    )
    for version in versions:
        version.kind_words = kind_words(version)
    return versions


def kind_words(version: GuardianModelVersion) -> str:
    """What a version is, naming what it sits on: a map stacked on a retrained version maps
    that version's answers, not the base model's."""
    if version.kind != GuardianModelKind.RECALIBRATED:
        return version.get_kind_display()
    if version.over_id is not None:
        return _("Recalibrated (a map over version %(number)s's answers)") % {
            "number": version.over.number
        }
    return _("Recalibrated (a map over the %(adapter)s guardian's answers as it ships)") % {
        "adapter": version.get_adapter_display()
    }


def kind_short(version: GuardianModelVersion) -> str:
    """What a version is in a few words, for a select's option: "retrained", or the map and
    what it sits on (the kind's own label names no version, so a map over a retrained version
    would read as a map over the base model)."""
    if version.kind != GuardianModelKind.RECALIBRATED:
        return _("retrained")
    if version.over_id is not None:
        return _("a map over version %(number)s") % {"number": version.over.number}
    return _("a map over the %(adapter)s guardian as it ships") % {
        "adapter": version.get_adapter_display()
    }


def before_words(version: GuardianModelVersion) -> str:
    """What "before" is in a version's held-out figures: what it was made on top of."""
    if version.over_id is not None:
        return _("version %(number)s's answers (the version it sits on)") % {
            "number": version.over.number
        }
    return _("the %(adapter)s guardian's answers as it ships") % {
        "adapter": version.get_adapter_display()
    }


# The fitting methods of a map, in a few words (engine/calibration.py fits both and keeps the
# better on the held-out examples).
METHOD_WORDS = {
    "isotonic": gettext_lazy(
        "isotonic: a stepwise, never-decreasing curve fitted to the labels (any shape, "
        "needs more examples)"
    ),
    "platt": gettext_lazy(
        "Platt: a logistic curve over the answers (two parameters, steadier on few examples)"
    ),
    "retrained": gettext_lazy("retrained: the model itself learnt again, no map"),
}


def _figure_rows(version: GuardianModelVersion) -> list[dict]:
    """Per condition, what the version scored on the examples it held out when it was made:
    before (its base: the adapter's answers, or the local guardian as it ships) and after."""
    rows = []
    for condition, figures in (version.figures or {}).items():
        before, after = figures.get("before") or {}, figures.get("after") or {}
        prior = figures.get("prior") or {}
        live_before = figures.get("before_at_live_prior") or {}
        live_after = figures.get("after_at_live_prior") or {}
        rows.append(
            {
                "condition": condition,
                "method": figures.get("method") or "retrained",
                "method_words": METHOD_WORDS.get(figures.get("method") or "retrained", ""),
                "held_out": after.get("n", figures.get("n_held_out", 0)),
                "ece": (before.get("ece"), after.get("ece")),
                "brier": (before.get("brier"), after.get("brier")),
                "prior_fitted": prior.get("fitted"),
                "prior_live": prior.get("live"),
                "prior_source": PRIOR_SOURCES.get((prior.get("live") or {}).get("source"), ""),
                "prior_note": prior.get("note", ""),
                "ece_live": (live_before.get("ece"), live_after.get("ece")),
                # The held-out difference's interval, at the prior the figures were read at.
                "ece_paired": ((figures.get("held_out_paired") or {}).get("figures") or {}).get(
                    "ece"
                ),
            }
        )
    return rows


# How a version's live prior was known, in the admins' words (policies/priors.py).
PRIOR_SOURCES = {
    "stated": gettext_lazy("stated by an admin"),
    "audit_sample": gettext_lazy("the audit sample people labelled"),
    "traffic_em": gettext_lazy("the guardian's scores on recent traffic (EM)"),
}


JOBS_SHOWN = 10
_UNFINISHED = (GuardianModelJobStatus.QUEUED, GuardianModelJobStatus.RUNNING)


def adapter_setup_missing(adapter: str) -> str:
    """The settings a guardian adapter still needs before it can answer ("" when none): the
    form offers it but says what to set, rather than a job that fails on it."""
    missing = {
        GuardianAdapter.HTTP: [
            name
            for name in ("GUARDIAN_HTTP_URL", "GUARDIAN_HTTP_MODEL_VERSION")
            if not getattr(settings, name)
        ],
        GuardianAdapter.OPENAI: [
            name for name in ("OPENAI_GUARDIAN_MODEL",) if not getattr(settings, name)
        ],
        GuardianAdapter.ONNX: [
            name for name in ("GUARDIAN_ONNX_MODELS",) if not getattr(settings, name)
        ],
    }.get(adapter, [])
    return ", ".join(missing)


def _polling(jobs: list[GuardianModelJob]) -> bool:
    return any(job.status in _UNFINISHED for job in jobs)


def _jobs() -> list[GuardianModelJob]:
    return list(
        GuardianModelJob.objects.select_related(
            "version", "version__over", "over", "created_by"
        ).order_by("-pk")[:JOBS_SHOWN]
    )


# The form's fields as its labels name them: an error names the field the admin sees.
FIELD_LABELS = {
    "kind": pgettext_lazy("how a version is made", "How"),
    "adapter": gettext_lazy("Over which guardian"),
    "over": gettext_lazy("On top of version"),
    "conditions": gettext_lazy("Conditions"),
    "job": gettext_lazy("The same job"),
}


def _stackable() -> list[GuardianModelVersion]:
    """The versions a map may sit on from the form: retrained ones (a map over a map would fit
    on answers already mapped; the base is the empty choice)."""
    return list(
        GuardianModelVersion.objects.filter(kind=GuardianModelKind.RETRAINED).order_by("-number")[
            :LIST_LIMIT
        ]
    )


@manage_policy
@require_http_methods(["GET", "POST"])
def guardian_model_list_page(request: HttpRequest) -> HttpResponse:
    """The versions, what runs use now, and the form that asks a worker for a new version
    from the labelled examples (POST), with the latest such jobs."""
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        over = request.POST.get("over", "").strip()
        fields = {
            "kind": request.POST.get("kind", ""),
            "adapter": request.POST.get("adapter", ""),
            "conditions": request.POST.getlist("conditions"),
            "over": int(over) if over.isdigit() else None,
        }
        errors = guardian_model_job_problems(**fields)
        if over and not over.isdigit():
            errors.setdefault("over", []).append(_("Give a version number."))
        missing = adapter_setup_missing(fields["adapter"])
        if missing:
            errors.setdefault("adapter", []).append(
                _("This guardian is not set up here: set %(missing)s first.") % {"missing": missing}
            )
        if not errors:
            job = guardian_model_job_start(**fields, created_by=request.user)
            messages.success(
                request,
                _(
                    "Job %(pk)s queued: a worker makes the version and it appears here, "
                    "inactive, for you to gate and activate."
                )
                % {"pk": job.pk},
            )
            return redirect("policies:models")
    versions = guardian_model_version_list()
    active = {v.adapter: v for v in GuardianModelVersion.objects.filter(is_active=True)}
    jobs = _jobs()
    return render(
        request,
        "policies/guardian_model_list.html",
        {
            "versions": versions,
            "capped": len(versions) == LIST_LIMIT,
            "adapters": [
                {
                    "name": adapter.value,
                    "label": adapter.label,
                    "active": active.get(adapter),
                    "missing": adapter_setup_missing(adapter),
                }
                for adapter in GuardianAdapter
            ],
            "jobs": jobs,
            "polling": _polling(jobs),
            "newest_version_pk": _newest_version_pk(),
            "kinds": GuardianModelJobKind.choices,
            "conditions": [c.value for c in Condition],
            "labelled": LabelledExample.objects.filter(source__in=PEOPLES_SOURCES).count(),
            "errors": errors,
            "error_rows": [
                (field, FIELD_LABELS.get(field, field.capitalize()), problems)
                for field, problems in errors.items()
            ],
            "stackable": _stackable(),
            "posted": request.POST if errors else None,
        },
        status=400 if errors else 200,
    )


def _newest_version_pk() -> int:
    return GuardianModelVersion.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


# The event a jobs poll raises when a job has made a version since the page was drawn: the
# versions table listens for it (hx-trigger "... from:body") and fetches itself again.
VERSIONS_CHANGED = "guardian-model-versions-changed"


@manage_policy
@require_GET
def guardian_model_jobs(request: HttpRequest) -> HttpResponse:
    """htmx: the latest jobs, polled while one is unfinished; the polling stops after. The
    poll names the newest version the page shows (?versions=pk); when a newer one exists, the
    answer raises VERSIONS_CHANGED so the versions table refreshes too."""
    jobs = _jobs()
    polling = _polling(jobs)
    newest = _newest_version_pk()
    response = render(
        request,
        "policies/guardian_model_list.html#jobs",
        {"jobs": jobs, "polling": polling, "newest_version_pk": newest},
    )
    if not polling:
        response = HttpResponseStopPolling(response.content)
    if request.GET.get("versions", "") != str(newest):
        response["HX-Trigger"] = VERSIONS_CHANGED
    return response


@manage_policy
@require_GET
def guardian_model_versions(request: HttpRequest) -> HttpResponse:
    """htmx: the versions table alone, fetched again when a job has made a version."""
    versions = guardian_model_version_list()
    return render(
        request,
        "policies/guardian_model_list.html#versions",
        {"versions": versions, "capped": len(versions) == LIST_LIMIT},
    )


@manage_policy
@require_GET
def guardian_model_detail_page(request: HttpRequest, version_id: int) -> HttpResponse:
    version = get_object_or_404(
        GuardianModelVersion.objects.select_related("created_by", "over"), pk=version_id
    )
    rows = _figure_rows(version)
    # The note on a condition with no live prior is one sentence for all of them: said once.
    prior_notes = list(dict.fromkeys(row["prior_note"] for row in rows if row["prior_note"]))
    return render(
        request,
        "policies/guardian_model_detail.html",
        {
            "version": version,
            "kind_words": kind_words(version),
            "before_words": before_words(version),
            "prior_notes": prior_notes,
            "figure_rows": rows,
            "activations": version.activations.select_related("activated_by")[:50],
            "active": GuardianModelVersion.objects.filter(
                adapter=version.adapter, is_active=True
            ).first(),
        },
    )


@manage_policy
@require_POST
def guardian_model_retire(request: HttpRequest, version_id: int) -> HttpResponse:
    """Retire the active version: runs on its adapter go back to the adapter as it ships (no
    gate: that is the guardian runs had before any version). A comment is required."""
    version = get_object_or_404(GuardianModelVersion, pk=version_id)
    comment = request.POST.get("comment", "").strip()
    if not comment:
        messages.error(request, _("Not retired: say why it is retired."))
    elif not version.is_active:
        messages.info(
            request,
            _("Guardian model version %(number)s is not active.") % {"number": version.number},
        )
    else:
        guardian_model_deactivate(adapter=version.adapter, retired_by=request.user, comment=comment)
        messages.success(
            request,
            _(
                "Guardian model version %(number)s retired: runs on the %(adapter)s guardian "
                "use it as it ships from their next turn."
            )
            % {"number": version.number, "adapter": version.get_adapter_display()},
        )
    return redirect("policies:model_detail", version_id=version.pk)


@manage_policy
@require_http_methods(["GET", "POST"])
def guardian_model_activate_page(request: HttpRequest, version_id: int) -> HttpResponse:
    """GET: the gate's report and the form. POST: activate through the service, which measures
    again now (the report shown may be stale); a refusal shows the report it measured."""
    version = get_object_or_404(GuardianModelVersion, pk=version_id)
    errors: dict[str, list[str]] = {}
    comment = request.POST.get("comment", "").strip()
    override_reason = request.POST.get("override_reason", "").strip()
    report = None
    if request.method == "POST" and not version.is_active:
        if not comment:
            errors["comment"] = [_("Say why this guardian model version is activated.")]
        else:
            try:
                guardian_model_activate(
                    number=version.number,
                    activated_by=request.user,
                    comment=comment,
                    override_reason=override_reason,
                )
            except GuardianGateRefused as refusal:
                report = refusal.report
                errors["override_reason"] = [
                    _("The regression gate refused this version; give a reason to override it.")
                ]
            except LearningError as error:
                errors["general"] = [str(error)]
            else:
                messages.success(
                    request,
                    _(
                        "Guardian model version %(number)s (%(model_version)s) is active: runs "
                        "on the %(adapter)s guardian use it from their next turn."
                    )
                    % {
                        "number": version.number,
                        "model_version": version.model_version,
                        "adapter": version.adapter,
                    },
                )
                return redirect("policies:model_detail", version_id=version.pk)
    measure_url = f"{request.path}?measure=1"
    # The gate asks both guardians about every example, which takes seconds (the first time in
    # a process, the local guardian is trained first): a plain GET answers at once with the
    # page, which fetches the report (htmx) or links to it (no JavaScript).
    pending = (
        request.method == "GET"
        and not version.is_active
        and not request.htmx
        and request.GET.get("measure") != "1"
    )
    if report is None and not version.is_active and not pending:
        report = guardian_model_gate_report(candidate=version)
    return render(
        request,
        "policies/guardian_model_activate.html#gate"
        if request.htmx and report is not None
        else "policies/guardian_model_activate.html",
        {
            "pending": pending,
            "measure_url": measure_url,
            "version": version,
            "report": report,
            "flips": flip_rows(
                (report or {}).get("flips", []), can_open_examples=can_open_examples(request)
            ),
            "flip_counts": flip_counts((report or {}).get("flips", [])),
            "review_share": settings.GUARDIAN_REVIEW_COST_SHARE,
            "rollback_at": _when(report),
            "version_label": _("version %(number)s") % {"number": version.number},
            "policy": PolicyVersion.objects.filter(is_active=True).first(),
            "errors": errors,
            "comment": comment,
            "override_reason": override_reason,
        },
        status=400 if errors else 200,
    )
