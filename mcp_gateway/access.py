"""Who may open a gateway session: the user behind a Guardian API token (sync Django code)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import close_old_connections

from guardian_core.models import ApiToken
from guardian_core.services import token_digest

# A session is an external run its client drives: the integrator's rights (guardian_core/roles.py),
# the same the API asks of who starts and drives an external run (runs/api.py).
REQUIRED_PERMISSIONS = ("runs.add_run", "runs.drive_run")


def token_user_id(token: str) -> int | None:
    """The id of the active user a live (not revoked) token acts as, if that user holds the
    rights to start and drive a run; None otherwise (unknown, revoked, inactive, not allowed)."""
    close_old_connections()  # a long-lived process: drop a connection the server closed
    if not token:
        return None
    found = (
        ApiToken.objects.select_related("user")
        .filter(digest=token_digest(token), revoked_at__isnull=True)
        .first()
    )
    if found is None or not found.user.is_active:
        return None
    user = get_user_model().objects.get(pk=found.user_id)  # a fresh permission cache
    if not user.has_perms(REQUIRED_PERMISSIONS):
        return None
    return user.pk
