"""The admins' page comparing two policy versions: the differences in words, then raw values."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from guardian_core.models import PolicyVersion
from guardian_core.roles import manage_policy
from policies.policy_diff import version_diff


@manage_policy
@require_GET
def policy_version_diff_page(request: HttpRequest, version_id: int) -> HttpResponse:
    """?against=<id> (else the version it was copied from, the active one, the one before)."""
    version = get_object_or_404(PolicyVersion, pk=version_id)
    others = list(PolicyVersion.objects.exclude(pk=version.pk).order_by("-number"))
    raw = request.GET.get("against", "")
    # An unknown or malformed id falls back to the default rather than failing the page.
    against = next((v for v in others if raw.isdigit() and v.pk == int(raw)), None)
    bad_against = bool(raw) and against is None
    same_version = raw.isdigit() and int(raw) == version.pk
    if against is None:
        against = default_against(version, others)
    return render(
        request,
        "policies/policy_version_diff.html",
        {
            "version": version,
            "against": against,
            "others": others,
            "bad_against": bad_against,
            "same_version": same_version,
            # The next step after reading a diff: offered only where the activate page could.
            "can_activate": not version.is_active and not version.problems(),
            "changes": version_diff(against, version) if against is not None else [],
        },
    )


def default_against(version: PolicyVersion, others: list[PolicyVersion]) -> PolicyVersion | None:
    """What a version is first compared with: the one it was copied from when recorded (the
    model may not record it), else the active one, else the previous number, else any."""
    source_id = getattr(version, "copied_from_id", None) or getattr(version, "based_on_id", None)
    by_pk = {v.pk: v for v in others}
    if source_id in by_pk:
        return by_pk[source_id]
    active = next((v for v in others if v.is_active), None)
    if active is not None:
        return active
    earlier = [v for v in others if v.number < version.number]
    return max(earlier, key=lambda v: v.number) if earlier else (others[0] if others else None)
