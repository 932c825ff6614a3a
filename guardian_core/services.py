"""Writes on API tokens and on people's accounts and roles: the sign-in side of the admin role.
Policy versions are written in policies/services.py."""

import hashlib
import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from guardian_core.models import ApiToken

ADMIN_ROLE = "admin"


# ---- API tokens -------------------------------------------------------------------

TOKEN_PREFIX = "gdn_"  # recognisable in a leaked config file or a secret scanner's rules
_PREFIX_CHARS = 12


def token_digest(token: str) -> str:
    """What is stored of a token, and what a presented one is looked up by."""
    return hashlib.sha256(token.encode()).hexdigest()


def api_token_create(*, user, name: str) -> tuple[ApiToken, str]:
    """A new token for `user`; returns it and its secret, which is not stored anywhere (only
    its SHA-256 is) and so can be shown once, now."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user,
        name=name.strip()[:120],
        prefix=secret[:_PREFIX_CHARS],
        digest=token_digest(secret),
    )
    return token, secret


def api_token_revoke(*, token_id: int) -> bool:
    """Revoke a token from now on; True if it was live."""
    return bool(
        ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
    )


# ---- people and their roles, managed by admins -----------------------------------------------


class PersonError(Exception):
    """A change to a person's account that is refused, with the reason in words."""


def person_create(*, username: str, email: str = "", roles: list[str]) -> tuple:
    """A new account with `roles` and a random first password, returned once (only its hash is
    stored); the person changes it after signing in."""
    user_model = get_user_model()
    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        user = user_model.objects.create_user(username=username, email=email, password=password)
        user.groups.set(Group.objects.filter(name__in=roles))
    return user, password


def person_roles_set(*, user_id: int, roles: list[str], by) -> None:
    """Give the person exactly `roles`. An admin cannot take the admin role from themselves:
    the last admin doing so would leave nobody able to give it back."""
    user = get_user_model().objects.get(pk=user_id)
    if user.pk == by.pk and ADMIN_ROLE not in roles and ADMIN_ROLE in _role_names(user):
        raise PersonError(_("You cannot take the admin role from yourself; ask another admin."))
    user.groups.set(Group.objects.filter(name__in=roles))


def person_active_set(*, user_id: int, active: bool, by) -> None:
    """Let a person sign in again, or stop them: their sessions and API tokens stop working at
    once (an inactive user is refused by both), and their history stays."""
    if user_id == by.pk and not active:
        raise PersonError(_("You cannot deactivate your own account; ask another admin."))
    get_user_model().objects.filter(pk=user_id).update(is_active=active)


def person_password_reset(*, user_id: int) -> str:
    """A new random password for the person, returned once."""
    user = get_user_model().objects.get(pk=user_id)
    password = secrets.token_urlsafe(12)
    user.set_password(password)
    user.save(update_fields=["password"])
    return password


def _role_names(user) -> set[str]:
    return set(user.groups.values_list("name", flat=True))
