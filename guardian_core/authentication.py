"""Bearer-token authentication for machines calling the API (ApiToken), and its OpenAPI entry."""

import functools
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import TextField
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from guardian_core.logs import log_bind
from guardian_core.models import ApiToken
from guardian_core.services import token_digest

# last_used_at is written at most this often per token: a busy integration must not turn
# every read into a write on the same row.
LAST_USED_GRANULARITY = timedelta(minutes=1)


@functools.cache
def _permission_names_sql(vendor: str) -> str:
    """A subquery for the token query: the names ("app_label.codename") of every permission
    the token's user holds, directly or through a group, space-separated. ModelBackend's two
    queries, folded into the token's statement; written once from the models' tables."""
    user_model = get_user_model()
    direct = user_model.user_permissions.through._meta
    grouped = Group.permissions.through._meta
    membership = user_model.groups.through._meta
    owner = f'"{ApiToken._meta.db_table}"."{ApiToken._meta.get_field("user").column}"'
    joined = (
        f"SELECT c.app_label || '.' || p.codename AS name FROM {Permission._meta.db_table} p "
        f"JOIN {ContentType._meta.db_table} c ON c.id = p.content_type_id "
    )
    names = (
        f"{joined}JOIN {direct.db_table} d ON d.{direct.get_field('permission').column} = p.id "
        f"WHERE d.{direct.get_field('user').column} = {owner} "
        f"UNION {joined}JOIN {grouped.db_table} g "
        f"ON g.{grouped.get_field('permission').column} = p.id "
        f"JOIN {membership.db_table} m "
        f"ON m.{membership.get_field('group').column} = g.{grouped.get_field('group').column} "
        f"WHERE m.{membership.get_field('user').column} = {owner}"
    )
    aggregate = "string_agg" if vendor == "postgresql" else "group_concat"
    return f"SELECT {aggregate}(names.name, ' ') FROM ({names}) names"


class BearerTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <token>`: the token's user, if the token is not revoked and the
    user is active. No header, or another scheme, leaves the request to session auth; a bearer
    token that is unknown, revoked or malformed is refused outright (never an anonymous
    fallback that would read as "no permission")."""

    keyword = b"bearer"

    def authenticate(self, request: Request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed(_("Authorization: give `Bearer <token>`, one token."))
        try:
            token = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed(_("Authorization: the token is not valid.")) from None
        names = RawSQL(_permission_names_sql(connection.vendor), [], output_field=TextField())
        found = (
            ApiToken.objects.select_related("user")
            .annotate(permission_names=names)
            .filter(digest=token_digest(token), revoked_at__isnull=True)
            .order_by()
            .first()
        )
        if found is None or not found.user.is_active:
            raise AuthenticationFailed(_("Authorization: the token is not valid."))
        if not found.user.is_superuser:  # who holds every permission, whatever the rows say
            # ModelBackend reads this cache: the permissions came with the token, in one
            # statement, instead of two more queries on every API call.
            found.user._perm_cache = set((found.permission_names or "").split())
        now = timezone.now()
        if found.last_used_at is None or found.last_used_at < now - LAST_USED_GRANULARITY:
            ApiToken.objects.filter(pk=found.pk).update(last_used_at=now)
        # The request's lines from here on say whose token it was (guardian_core/logs.py).
        log_bind(user_id=found.user.pk)
        return found.user, found

    # No authenticate_header: the API answers 403 to a missing or bad credential, as it did
    # before tokens (a 401 would need a challenge the browser's session cannot answer).


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "guardian_core.authentication.BearerTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema) -> dict:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": _("An API token an admin created on the API tokens page (shown once)."),
        }
