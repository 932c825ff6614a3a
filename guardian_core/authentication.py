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


@functools.cache
def _holder_sql() -> str:
    """The lean path's token query (token_holder): the token's user, whether the token's
    last use is stale, and whether the user holds one permission, directly or through a
    group; one statement, no model built."""
    user_model = get_user_model()
    direct = user_model.user_permissions.through._meta
    grouped = Group.permissions.through._meta
    membership = user_model.groups.through._meta
    token = ApiToken._meta
    user_column = token.get_field("user").column
    return (
        f"SELECT t.id, t.{user_column}, "
        f"(t.last_used_at IS NULL OR t.last_used_at < %s), u.is_superuser OR EXISTS ("
        f"SELECT 1 FROM {Permission._meta.db_table} p "
        f"JOIN {ContentType._meta.db_table} c ON c.id = p.content_type_id "
        f"WHERE c.app_label = %s AND p.codename = %s AND ("
        f"p.id IN (SELECT d.{direct.get_field('permission').column} FROM {direct.db_table} d "
        f"WHERE d.{direct.get_field('user').column} = t.{user_column}) "
        f"OR p.id IN (SELECT g.{grouped.get_field('permission').column} "
        f"FROM {grouped.db_table} g JOIN {membership.db_table} m "
        f"ON m.{membership.get_field('group').column} = g.{grouped.get_field('group').column} "
        f"WHERE m.{membership.get_field('user').column} = t.{user_column}))) "
        f"FROM {token.db_table} t JOIN {user_model._meta.db_table} u ON u.id = t.{user_column} "
        f"WHERE t.digest = %s AND t.revoked_at IS NULL AND u.is_active"
    )


def token_holder(request, permission: str) -> int | None:
    """For a hot endpoint's lean path (no DRF): the id of the user whose live bearer token the
    request carries, when that user is active and holds `permission` ("app_label.codename"),
    read in one statement; None otherwise, and for any request this path does not decide
    (no bearer token, a malformed one): the endpoint's DRF view then answers it, its 403
    included, exactly as before. Marks the token used as BearerTokenAuthentication does."""
    parts = get_authorization_header(request).split()
    if len(parts) != 2 or parts[0].lower() != BearerTokenAuthentication.keyword:
        return None
    try:
        token = parts[1].decode("ascii")
    except UnicodeDecodeError:
        return None
    app_label, codename = permission.split(".", 1)
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            _holder_sql(),
            [now - LAST_USED_GRANULARITY, app_label, codename, token_digest(token)],
        )
        found = cursor.fetchone()
    if found is None or not found[3]:
        return None
    token_id, user_id, stale = found[0], found[1], found[2]
    if stale:
        ApiToken.objects.filter(pk=token_id).update(last_used_at=now)
    log_bind(user_id=user_id)
    return user_id


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
