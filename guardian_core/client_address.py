"""The client's address as login throttling (django-axes) sees it: REMOTE_ADDR, or behind
trusted proxies the address the outermost trusted one saw, read from X-Forwarded-For."""

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str | None:
    """The address a request came from (AXES_CLIENT_IP_CALLABLE).

    With GUARDIAN_TRUSTED_PROXY_COUNT = 0 (no proxy: the default) it is REMOTE_ADDR, and an
    X-Forwarded-For header, which any client can send, changes nothing. With N trusted proxies
    in front (BEHIND_TLS_PROXY), each appends the address it received from, so the N-th entry
    from the right is the one the outermost trusted proxy saw: entries left of it are the
    client's own to forge. A header too short or not an address falls back to REMOTE_ADDR (the
    proxy's: throttling is then stricter, never looser)."""
    remote = request.META.get("REMOTE_ADDR") or None
    count = getattr(settings, "GUARDIAN_TRUSTED_PROXY_COUNT", 0)
    if count <= 0:
        return remote
    forwarded = [entry.strip() for entry in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [entry for entry in forwarded if entry]
    if len(forwarded) < count:
        return remote
    candidate = forwarded[-count]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote
