"""Bearer-token authentication for machines calling the API (ApiToken), and its OpenAPI entry."""

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from guardian_core.models import ApiToken
from guardian_core.services import token_digest

# last_used_at is written at most this often per token: a busy integration must not turn
# every read into a write on the same row.
LAST_USED_GRANULARITY = timedelta(minutes=1)


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
            raise AuthenticationFailed("Authorization: give `Bearer <token>`, one token.")
        try:
            token = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authorization: the token is not valid.") from None
        found = (
            ApiToken.objects.select_related("user")
            .filter(digest=token_digest(token), revoked_at__isnull=True)
            .first()
        )
        if found is None or not found.user.is_active:
            raise AuthenticationFailed("Authorization: the token is not valid.")
        now = timezone.now()
        if found.last_used_at is None or found.last_used_at < now - LAST_USED_GRANULARITY:
            ApiToken.objects.filter(pk=found.pk).update(last_used_at=now)
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
            "description": "An API token an admin created on the API tokens page (shown once).",
        }
