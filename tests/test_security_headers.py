"""The response headers that keep untrusted content inert: a strict CSP, HSTS over TLS, and the
older headers (nosniff, referrer policy, no framing); plus htmx configured for that CSP."""

import json
import re

import pytest

from tests.processes import REPO, run_manage

pytestmark = pytest.mark.django_db

STRICT = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "frame-ancestors": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "object-src": ["'none'"],
}


def directives(header: str) -> dict[str, list[str]]:
    parsed = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            parsed[words[0]] = words[1:]
    return parsed


def test_a_page_carries_the_strict_content_security_policy(client, reviewer):
    client.force_login(reviewer)
    response = client.get("/escalations/")

    assert response.status_code == 200
    header = response.headers["Content-Security-Policy"]
    assert directives(header) == STRICT
    assert "unsafe-inline" not in header
    assert "unsafe-eval" not in header
    # No nonce either: there is no inline script for one to let through.
    assert "nonce-" not in header


def test_the_sign_in_page_and_the_admin_carry_it_too(client, admin):
    for response in (client.get("/accounts/login/"), client.get("/admin/login/")):
        assert directives(response.headers["Content-Security-Policy"]) == STRICT
    client.force_login(admin)
    assert directives(client.get("/admin/").headers["Content-Security-Policy"]) == STRICT


def test_the_older_security_headers_are_kept(client):
    response = client.get("/accounts/login/")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"
    assert response.headers["X-Frame-Options"] == "DENY"


def test_hsts_is_sent_on_a_secure_request_when_configured(client, settings):
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True

    over_tls = client.get("/accounts/login/", secure=True)
    plain = client.get("/accounts/login/")

    assert over_tls.headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    # Over plain HTTP the header would mean nothing to a browser, and it is not sent.
    assert "Strict-Transport-Security" not in plain.headers


def test_hsts_is_not_sent_when_switched_off(client, settings):
    settings.SECURE_HSTS_SECONDS = 0
    assert "Strict-Transport-Security" not in client.get("/accounts/login/", secure=True).headers


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({"DEBUG": "true"}, "0 False"),
        ({"DEBUG": "false"}, "31536000 False"),
        (
            {
                "DEBUG": "false",
                "SECURE_HSTS_SECONDS": "600",
                "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
            },
            "600 True",
        ),
    ],
    ids=["debug: off", "production: a year", "configured"],
)
def test_hsts_defaults_to_a_year_outside_debug_and_is_configurable(environment, expected):
    result = run_manage(
        "shell",
        "-c",
        "from django.conf import settings as s;"
        "print(s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS)",
        **{
            "SECRET_KEY": "a-test-key-with-enough-different-characters-to-pass-the-check",
            "ALLOWED_HOSTS": "guardian.example",
            "SECURE_HSTS_SECONDS": None,
            "SECURE_HSTS_INCLUDE_SUBDOMAINS": None,
            **environment,
        },
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == expected


def test_htmx_is_configured_for_the_policy(client, reviewer):
    client.force_login(reviewer)
    html = client.get("/escalations/").content.decode()

    match = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", html)
    assert match, "base.html has no htmx-config meta"
    config = json.loads(match[1])
    assert config["allowEval"] is False
    assert config["allowScriptTags"] is False
    assert config["includeIndicatorStyles"] is False
    assert config["selfRequestsOnly"] is True
    # htmx reads the meta when it loads, so the meta must come first.
    assert html.index('name="htmx-config"') < html.index("htmx-2")


# What the policy would refuse (inline script and style, event-handler attributes) and what
# htmx could only do with eval (hx-on, trigger filters, js: values), anywhere in a template.
FORBIDDEN_IN_TEMPLATES = {
    "inline <script>": r"<script(?![^>]*\bsrc=)[^>]*>",
    "<style>": r"<style\b",
    "style attribute": r"\sstyle=",
    "event-handler attribute": r"\son[a-z]+\s*=",
    "hx-on": r"\bhx-on",
    "hx-trigger filter": r"hx-trigger=(\"[^\"]*\[|'[^']*\[)",
    "js: value": r"hx-(vals|headers)=(\"|')\s*(js|javascript):",
}
DJANGO_COMMENT = re.compile(r"\{#.*?#\}|\{% comment %\}.*?\{% endcomment %\}", re.DOTALL)


def test_no_template_holds_what_the_policy_refuses():
    templates = [*REPO.glob("templates/**/*.html"), *REPO.glob("*/templates/**/*.html")]
    offenders = []
    for path in sorted(templates):
        text = DJANGO_COMMENT.sub("", path.read_text())
        for what, pattern in FORBIDDEN_IN_TEMPLATES.items():
            if re.search(pattern, text):
                offenders.append(f"{path.relative_to(REPO)}: {what}")
    assert offenders == []
