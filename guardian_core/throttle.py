"""The username django-axes counts a failed sign-in under (AXES_USERNAME_CALLABLE)."""

from django.http import HttpRequest

# axes stores the username it counts under in a 255-character column (AccessAttempt.username).
AXES_USERNAME_CHARS = 255


def throttled_username(request: HttpRequest, credentials: dict | None) -> str | None:
    """The username a sign-in was tried with, cut to the column axes stores it in.

    Anything can be typed on a sign-in page: a 256-character name made axes' insert fail on
    PostgreSQL (a 500 instead of "wrong username or password"). No account's name is that
    long (usernames are at most 150 characters), so a cut name still locks out exactly the
    names that were tried, per address, as any other."""
    if credentials:
        username = credentials.get("username")
    else:
        username = getattr(request, "data", request.POST).get("username")
    if not isinstance(username, str):
        return username
    return username[:AXES_USERNAME_CHARS]
