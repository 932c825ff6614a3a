"""Project-level pages: the role-based home redirect, health, and the admins' policy versions."""

import logging

from django.contrib.auth.decorators import login_not_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from guardian_core.health import (
    broker_status,
    database_status,
    describe_broker_failure,
    describe_database_failure,
    public_status,
)
from guardian_core.roles import roles_of
from guardian_core.selectors import policy_version_list

logger = logging.getLogger(__name__)


def home(request: HttpRequest) -> HttpResponse:
    """Send a signed-in user to the landing page of their first role."""
    roles = roles_of(request.user)
    if not roles:
        raise PermissionDenied("Your account has no role yet. Ask an admin to give you one.")
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


@permission_required("guardian_core.manage_policy", raise_exception=True)
def policy_version_list_page(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "guardian_core/policy_version_list.html",
        {"policy_versions": policy_version_list()},
    )
