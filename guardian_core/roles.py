"""The three roles: their groups and permissions, where each lands, and the navigation it sees.

One table (ROLES) is the source of truth; the groups in the database are brought in line with
it after every migrate, and the navigation and landing page are derived from it.
"""

from dataclasses import dataclass

from django.apps import apps as django_apps
from django.contrib.auth.decorators import permission_required
from django.contrib.auth.models import Group, Permission
from django.http import HttpRequest
from django.urls import reverse
from django.utils.translation import gettext_lazy, pgettext_lazy


@dataclass(frozen=True)
class Role:
    name: str  # the group's name: stored, never translated
    label: str  # the role's name as a person reads it (the people page)
    screen_permission: str  # "app_label.codename" that opens the role's own screens
    landing_url_name: str
    nav_label: str
    permissions: tuple[str, ...]
    # More of the role's screens in the navigation, after its landing page: (label, url name).
    more_nav: tuple[tuple[str, str], ...] = ()


ROLES: tuple[Role, ...] = (
    Role(
        name="reviewer",
        label=pgettext_lazy("role", "reviewer"),
        screen_permission="escalations.review_escalation",
        landing_url_name="escalations:queue",
        nav_label=gettext_lazy("Escalations"),
        permissions=(
            "escalations.review_escalation",
            "escalations.view_escalation",
            "escalations.add_verdict",
            "escalations.view_verdict",
        ),
    ),
    Role(
        name="auditor",
        label=pgettext_lazy("role", "auditor"),
        screen_permission="runs.audit_run",
        landing_url_name="runs:list",
        nav_label=gettext_lazy("Runs"),
        permissions=(
            "runs.audit_run",
            "runs.view_run",
            "runs.view_turn",
            "runs.view_decision",
            "runs.view_toolcall",
            "escalations.view_escalation",
            "escalations.view_verdict",
            "escalations.view_labelledexample",
            "guardian_core.view_policyversion",
        ),
    ),
    Role(
        name="admin",
        label=pgettext_lazy("role", "admin"),
        screen_permission="guardian_core.manage_policy",
        landing_url_name="policies:list",
        nav_label=gettext_lazy("Policy versions"),
        permissions=(
            "guardian_core.manage_policy",
            "guardian_core.view_policyversion",
            "guardian_core.add_policyversion",
            "guardian_core.change_policyversion",
            # The rubric reviewers read next to a decision, written on the guidance page.
            "escalations.view_reviewguidance",
            "escalations.add_reviewguidance",
            "escalations.change_reviewguidance",
            "escalations.delete_reviewguidance",
            # Until operators get a role of their own, admins start and cancel runs through the
            # API (runs/api.py: RunCreateApi, RunCancelApi) and read the runs they started. An
            # external run's loop is an integrator's to drive, with its token: not theirs.
            "runs.add_run",
            "runs.change_run",
            # Machines' API tokens, created (shown once) and revoked on the tokens page.
            "guardian_core.view_apitoken",
            "guardian_core.add_apitoken",
            "guardian_core.change_apitoken",
        ),
        more_nav=(
            (gettext_lazy("Reviewers' guidance"), "guidance:list"),
            (gettext_lazy("API tokens"), "tokens:list"),
            (gettext_lazy("People"), "people:list"),
        ),
    ),
    # A machine's role: the agent loop that runs elsewhere and asks Guardian before and after
    # each step (runs/external.py), with an API token. Its screen is the API's documentation.
    Role(
        name="integrator",
        label=pgettext_lazy("role", "integrator"),
        screen_permission="runs.drive_run",
        landing_url_name="api:docs",
        nav_label=gettext_lazy("API"),
        permissions=("runs.add_run", "runs.drive_run"),
    ),
)


# The admin role's pages (its own room, policies/, and the people and tokens pages here): a
# signed-in person without the permission gets 403, not a login page.
manage_policy = permission_required("guardian_core.manage_policy", raise_exception=True)


def roles_of(user) -> list[Role]:
    """The roles whose screens `user` may open, in the order of ROLES."""
    if not user.is_authenticated:
        return []
    return [role for role in ROLES if user.has_perm(role.screen_permission)]


def navigation(request: HttpRequest) -> dict:
    """Template context: the navigation entries of the signed-in user's roles."""
    entries = []
    for role in roles_of(request.user):
        for label, url_name in ((role.nav_label, role.landing_url_name), *role.more_nav):
            url = reverse(url_name)
            entries.append(
                {
                    "role": role.name,
                    "label": label,
                    "url": url,
                    "current": request.path.startswith(url),
                }
            )
    return {"nav_entries": entries}


def roles_sync() -> None:
    """Create the role groups and set each one's permissions to exactly those in ROLES."""
    for role in ROLES:
        group, _ = Group.objects.get_or_create(name=role.name)
        group.permissions.set([_permission(dotted) for dotted in role.permissions])


def sync_role_groups_after_migrate(sender, **kwargs) -> None:
    """post_migrate receiver: groups follow once every app's permissions exist.

    Django sends post_migrate once per app that has a models module and creates that app's
    permissions then, so the groups are synced on the signal for the last such app, when all
    of them exist.
    """
    with_models = [c for c in django_apps.get_app_configs() if c.models_module is not None]
    if sender is with_models[-1]:
        roles_sync()


def _permission(dotted: str) -> Permission:
    app_label, codename = dotted.split(".", 1)
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)
