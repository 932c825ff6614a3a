"""/metrics: the Prometheus scrape, off unless enabled and then only for the operators' scraper
(a bearer token or an address on the allow-list; docs/OPERATIONS.md, Metrics)."""

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from guardian_core import metrics
from guardian_core.client_address import client_address
from policies.metrics import GuardianStateCollector


def scrape_allowed(request: HttpRequest) -> bool:
    """A request with the configured bearer token, or from an allowed address. With neither
    configured nobody is allowed: enabling the endpoint never opens it to everyone."""
    token = settings.GUARDIAN_METRICS_TOKEN
    if token:
        header = request.headers.get("Authorization", "")
        scheme, _, given = header.partition(" ")
        given = given.strip().encode()
        if scheme.lower() == "bearer" and hmac.compare_digest(given, token.encode()):
            return True
    allow = settings.GUARDIAN_METRICS_ALLOW
    address = client_address(request)
    return bool(allow and address and metrics.address_allowed(address, allow))


@login_not_required
@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format: this process's instruments (every process's in multiprocess
    mode) and the database's state figures, computed now."""
    if not settings.GUARDIAN_METRICS_ENABLED:
        raise Http404("metrics are not enabled")
    if not scrape_allowed(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    body, content_type = metrics.exposition([GuardianStateCollector()])
    return HttpResponse(body, content_type=content_type)
