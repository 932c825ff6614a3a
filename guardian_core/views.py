"""The floor's pages: the role-based home redirect, health, the password change, and the
sign-in side of the admin role's work (API tokens: list, create shown once, revoke; people:
their roles, sign-in and first password). The admins' other pages are in policies/."""

import logging

from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.views import PasswordChangeView
from django.contrib.messages.views import SuccessMessageMixin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from guardian_core.forms import ApiTokenForm, PersonForm, role_choices
from guardian_core.health import (
    broker_status,
    database_status,
    describe_broker_failure,
    describe_database_failure,
    public_status,
)
from guardian_core.models import ApiToken
from guardian_core.roles import manage_policy, roles_of
from guardian_core.selectors import api_token_list, people_list
from guardian_core.services import (
    PersonError,
    api_token_create,
    api_token_revoke,
    person_active_set,
    person_create,
    person_password_reset,
    person_roles_set,
)

logger = logging.getLogger(__name__)


def home(request: HttpRequest) -> HttpResponse:
    """Send a signed-in user to the landing page of their first role."""
    roles = roles_of(request.user)
    if not roles:
        raise PermissionDenied(_("Your account has no role yet. Ask an admin to give you one."))
    return redirect(roles[0].landing_url_name)


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 with the status of the database and broker, 503 when either is down.

    Anyone may ask, so the answer says ok or down per service and nothing more: what the
    driver said (host names, users, versions) goes to the log for the operators."""
    database = database_status()
    broker = broker_status()
    if not database["ok"]:
        logger.warning("healthz: %s", describe_database_failure(database))
    if not broker["ok"]:
        logger.warning("healthz: %s", describe_broker_failure(broker))
    healthy = database["ok"] and broker["ok"]
    body = {
        "status": "ok" if healthy else "down",
        "database": public_status(database),
        "broker": public_status(broker),
    }
    return JsonResponse(body, status=200 if healthy else 503)


@manage_policy
@never_cache
@require_http_methods(["GET", "POST"])
def api_token_list_page(request: HttpRequest) -> HttpResponse:
    """Tokens and a form for a new one. A created token's secret is in this one response and
    nowhere else (never_cache: not in a cache either)."""
    form = ApiTokenForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        token, secret = api_token_create(
            user=form.cleaned_data["user"], name=form.cleaned_data["name"]
        )
        created = {"token": token, "secret": secret}
        form = ApiTokenForm()
    return render(
        request,
        "guardian_core/api_tokens.html",
        {"form": form, "created": created, "tokens": api_token_list()},
        status=400 if form.errors else 200,
    )


@manage_policy
@require_http_methods(["GET", "POST"])
def api_token_revoke_view(request: HttpRequest, token_id: int) -> HttpResponse:
    """GET: the confirmation (a revoked token cannot come back, and the machines using it stop
    at once), a page of its own so it works by keyboard and without JavaScript. POST: revoke."""
    token = get_object_or_404(ApiToken.objects.select_related("user"), pk=token_id)
    if request.method == "GET":
        if token.revoked_at is not None:
            messages.info(request, _("Token %(token)s was already revoked.") % {"token": token})
            return redirect("tokens:list")
        return render(request, "guardian_core/api_token_revoke.html", {"token": token})
    if api_token_revoke(token_id=token.pk):
        messages.success(
            request, _("Token %(token)s revoked: it opens nothing from now on.") % {"token": token}
        )
    else:
        messages.info(request, _("Token %(token)s was already revoked.") % {"token": token})
    return redirect("tokens:list")


@manage_policy
@never_cache
@require_http_methods(["GET", "POST"])
def people_page(request: HttpRequest) -> HttpResponse:
    """Everyone's roles, and a form for a new person. A new or reset password is in this one
    response only (never_cache)."""
    form = PersonForm(request.POST or None)
    issued = None
    if request.method == "POST" and form.is_valid():
        user, password = person_create(
            username=form.cleaned_data["username"],
            email=form.cleaned_data["email"],
            roles=form.cleaned_data["roles"],
        )
        issued = {"user": user, "password": password, "new": True}
        form = PersonForm()
    return _people_response(request, form=form, issued=issued)


@manage_policy
@require_POST
def person_roles_view(request: HttpRequest, user_id: int) -> HttpResponse:
    person = get_object_or_404(people_list(), pk=user_id)
    labels = dict(role_choices())
    roles = [name for name in request.POST.getlist("roles") if name in labels]
    try:
        person_roles_set(user_id=person.pk, roles=roles, by=request.user)
    except PersonError as error:
        messages.error(request, str(error))
    else:
        # Translators: roles is a list of role names, or "none".
        message = _("%(name)s: roles %(roles)s.") % {
            "name": person.get_username(),
            "roles": ", ".join(str(labels[name]) for name in roles) or _("none"),
        }
        messages.success(request, message)
    return redirect("people:list")


@manage_policy
@require_POST
def person_active_view(request: HttpRequest, user_id: int) -> HttpResponse:
    person = get_object_or_404(people_list(), pk=user_id)
    active = request.POST.get("active") == "1"
    try:
        person_active_set(user_id=person.pk, active=active, by=request.user)
    except PersonError as error:
        messages.error(request, str(error))
    else:
        if active:
            message = _("%(name)s may sign in again.")
        else:
            message = _("%(name)s can no longer sign in or use their tokens.")
        messages.success(request, message % {"name": person.get_username()})
    return redirect("people:list")


@manage_policy
@never_cache
@require_POST
def person_password_view(request: HttpRequest, user_id: int) -> HttpResponse:
    person = get_object_or_404(people_list(), pk=user_id)
    password = person_password_reset(user_id=person.pk)
    return _people_response(
        request, form=PersonForm(), issued={"user": person, "password": password, "new": False}
    )


def _people_response(request: HttpRequest, *, form: PersonForm, issued: dict | None):
    people = [
        {"user": user, "roles": {group.name for group in user.groups.all()}}
        for user in people_list()
    ]
    return render(
        request,
        "guardian_core/people.html",
        {"form": form, "issued": issued, "people": people, "role_names": role_choices()},
        status=400 if form.errors else 200,
    )


class PasswordChange(SuccessMessageMixin, PasswordChangeView):
    """Anyone signed in changes their own password (a first one an admin gave them, say)."""

    template_name = "registration/password_change.html"
    success_url = reverse_lazy("home")
    success_message = gettext_lazy("Your password is changed.")
