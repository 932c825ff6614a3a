"""Receivers that tie escalations to the rest of Django: signing out releases held items."""

from django.contrib.auth.models import AbstractBaseUser
from django.http import HttpRequest

from escalations.claims import escalation_release_all


def release_claims_on_logout(
    sender: type, request: HttpRequest | None, user: AbstractBaseUser | None, **kwargs
) -> None:
    """A reviewer who signs out stops working: what they held goes back to the queue now
    rather than when the claim lapses."""
    if user is not None and user.is_authenticated:
        escalation_release_all(reviewer=user)
