"""Reads of API tokens and people that the floor's pages need."""

from django.contrib.auth import get_user_model
from django.db.models import F, QuerySet

from guardian_core.models import ApiToken


def api_token_list() -> QuerySet[ApiToken]:
    """Every API token, live ones first, newest first, with the account each acts as."""
    return ApiToken.objects.select_related("user").order_by(
        F("revoked_at").desc(nulls_first=True), "-created_at", "-id"
    )


def people_list() -> QuerySet:
    """Every account with its role groups, by sign-in name (people, not rows: a few hundred)."""
    return get_user_model().objects.prefetch_related("groups").order_by("username")
