"""The policy version pages: the list, one version, a new one (the editor) and its preview."""

from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from guardian_core.models import PolicyVersion
from guardian_core.roles import manage_policy
from policies.forms import PolicyVersionForm
from policies.selectors import policy_version_list
from policies.services import policy_version_create


@manage_policy
@require_GET
def policy_version_list_page(request: HttpRequest) -> HttpResponse:
    versions = list(policy_version_list())
    return render(
        request,
        "policies/policy_version_list.html",
        {
            "policy_versions": versions,
            "active_version": next((v for v in versions if v.is_active), None),
        },
    )


@manage_policy
@require_GET
def policy_version_detail_page(request: HttpRequest, version_id: int) -> HttpResponse:
    version = get_object_or_404(
        policy_version_list().select_related("copied_from", "created_by"), pk=version_id
    )
    form = PolicyVersionForm(initial=PolicyVersionForm.initial_from(version))
    source = version.copied_from
    return render(
        request,
        "policies/policy_version_detail.html",
        {
            "version": version,
            # Questions whose text differs from the version it was copied from.
            "reworded": [
                condition
                for condition, question in version.question_set.items()
                if source is not None and source.question_set.get(condition) != question
            ],
            "derived": form.derived_thresholds(),
            "problems": version.problems(),
            # Where the judge lives: every judge adapter calls this one server.
            "judge_server": _without_userinfo(settings.OPENAI_BASE_URL),
        },
    )


def _without_userinfo(url: str) -> str:
    # A base URL may carry a user and password; the page shows where, never how to sign in.
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


@manage_policy
@require_http_methods(["GET", "POST"])
def policy_version_new_page(request: HttpRequest) -> HttpResponse:
    """A new version, prefilled from ?from=<id> or the active one, with any query parameter
    named like a field over it (a link's suggested values, listed in a notice); saving makes
    a draft through the service (activation goes through the gate page)."""
    prefilled: list[dict] = []
    if request.method == "POST":
        form = PolicyVersionForm(request.POST)
        if form.is_valid():
            try:
                version = policy_version_create(**form.content(), created_by=request.user)
            except ValidationError as error:
                for problem in error.messages:
                    form.add_error(None, problem)
            else:
                messages.success(
                    request,
                    _(
                        "Policy version %(version)s saved as a draft: compare it, then activate "
                        "it through the regression gate."
                    )
                    % {"version": version},
                )
                return redirect("policies:detail", version_id=version.pk)
    else:
        raw = request.GET.get("from", "")
        base = _base_version(raw)
        if raw and (base is None or str(base.pk) != raw):
            # A link to a version that is not there: say which one the form copies instead.
            messages.warning(
                request,
                _("No policy version %(raw)s to copy from; the form starts from %(base)s instead.")
                % {"raw": raw, "base": base if base is not None else _("nothing")},
            )
        initial, prefilled = PolicyVersionForm.prefill(
            PolicyVersionForm.initial_from(base), request.GET
        )
        form = PolicyVersionForm(initial=initial)
    return render(
        request,
        "policies/policy_version_new.html",
        {"form": form, "derived": form.derived_thresholds(), "prefilled": prefilled},
        status=400 if form.errors else 200,
    )


@manage_policy
@require_POST
def policy_version_preview(request: HttpRequest) -> HttpResponse:
    """htmx: the t* and band the costs typed so far give, per condition, and (out of band) which
    questions are reworded from the version being edited."""
    form = PolicyVersionForm(request.POST)
    return render(
        request,
        "policies/policy_version_new.html#preview",
        {"derived": form.derived_thresholds(), "question_rows": form.question_rows()},
    )


def _base_version(raw: str) -> PolicyVersion | None:
    if raw.isdigit():
        found = PolicyVersion.objects.filter(pk=int(raw)).first()
        if found is not None:
            return found
    return PolicyVersion.objects.filter(is_active=True).first() or PolicyVersion.objects.first()
