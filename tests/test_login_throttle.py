"""Login throttling: wrong passwords in a row lock one username from one address out, with a
clear page, on the sign-in page and the admin's alike (django-axes)."""

import time
from datetime import timedelta

import pytest
from django.conf import settings as django_settings

from tests.conftest import PERSONA_PASSWORD

pytestmark = pytest.mark.django_db

LOGIN_URLS = ["/accounts/login/", "/admin/login/"]


def _sign_in(client, url: str, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def _signed_in_as(client) -> str | None:
    user_id = client.session.get("_auth_user_id")
    if user_id is None:
        return None
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(pk=user_id).get_username()


def _fail(client, url: str, username: str, times: int, address: str = "10.0.0.1") -> None:
    for _ in range(times):
        _sign_in(client, url, username, "wrong password", address)


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_the_right_password_after_too_many_wrong_ones_is_refused_with_the_lockout_page(
    client, admin, url
):
    _fail(client, url, "admin", 50)
    response = _sign_in(client, url, "admin", PERSONA_PASSWORD)
    assert response.status_code == 429
    assert b"Too many sign-in attempts" in response.content
    assert f"after {django_settings.AXES_FAILURE_LIMIT} wrong".encode() in response.content
    assert _signed_in_as(client) is None


@pytest.mark.parametrize("url", LOGIN_URLS)
def test_the_lock_starts_at_the_failure_limit_not_before(client, admin, url, settings):
    _fail(client, url, "admin", settings.AXES_FAILURE_LIMIT - 1)
    response = _sign_in(client, url, "admin", PERSONA_PASSWORD)
    assert response.status_code == 302
    assert _signed_in_as(client) == "admin"


def test_a_right_password_clears_the_count_of_earlier_mistakes(client, admin, settings):
    url = LOGIN_URLS[0]
    _fail(client, url, "admin", settings.AXES_FAILURE_LIMIT - 1)
    assert _sign_in(client, url, "admin", PERSONA_PASSWORD).status_code == 302
    client.logout()
    _fail(client, url, "admin", settings.AXES_FAILURE_LIMIT - 1)
    assert _sign_in(client, url, "admin", PERSONA_PASSWORD).status_code == 302


def test_another_user_behind_the_same_address_still_signs_in(client, admin, reviewer):
    url = LOGIN_URLS[0]
    _fail(client, url, "admin", 20)
    assert _sign_in(client, url, "reviewer", PERSONA_PASSWORD).status_code == 302
    assert _signed_in_as(client) == "reviewer"


def test_an_attacker_elsewhere_cannot_lock_the_user_out_of_their_own_address(client, admin):
    url = LOGIN_URLS[0]
    _fail(client, url, "admin", 20, address="203.0.113.9")
    assert _sign_in(client, url, "admin", PERSONA_PASSWORD, address="10.0.0.1").status_code == 302


def test_the_lock_lifts_after_the_cool_off_time(client, admin, settings):
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    url = LOGIN_URLS[0]
    _fail(client, url, "admin", settings.AXES_FAILURE_LIMIT)
    assert _sign_in(client, url, "admin", PERSONA_PASSWORD).status_code == 429
    time.sleep(1.5)
    assert _sign_in(client, url, "admin", PERSONA_PASSWORD).status_code == 302


# ---- the address behind a proxy -----------------------------------------------------------------

PROXY = "10.0.0.2"


def _through(client, username: str, password: str, *, remote: str, forwarded: str = ""):
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
    return client.post(
        LOGIN_URLS[0], {"username": username, "password": password}, REMOTE_ADDR=remote, **extra
    )


def test_without_a_proxy_a_forged_forwarded_for_does_not_change_the_address(client, admin):
    # No trusted proxy (the default): each attempt claims another address, and all count
    # against the one they came from.
    for i in range(django_settings.AXES_FAILURE_LIMIT + 1):
        _through(client, "admin", "wrong", remote="203.0.113.9", forwarded=f"198.51.100.{i}")
    response = _through(
        client, "admin", PERSONA_PASSWORD, remote="203.0.113.9", forwarded="198.51.100.77"
    )
    assert response.status_code == 429


def test_behind_one_trusted_proxy_the_client_is_the_address_the_proxy_saw(client, admin, settings):
    settings.GUARDIAN_TRUSTED_PROXY_COUNT = 1
    # An attacker behind the same proxy, forging the header as a colleague's address: the
    # proxy appends the address it really saw, and that one is locked out.
    for _ in range(django_settings.AXES_FAILURE_LIMIT + 1):
        _through(client, "admin", "wrong", remote=PROXY, forwarded="198.51.100.7, 203.0.113.9")
    locked = _through(client, "admin", PERSONA_PASSWORD, remote=PROXY, forwarded="203.0.113.9")
    assert locked.status_code == 429
    # The real admin, at 198.51.100.7 behind the same proxy, still signs in.
    response = _through(client, "admin", PERSONA_PASSWORD, remote=PROXY, forwarded="198.51.100.7")
    assert response.status_code == 302
    assert _signed_in_as(client) == "admin"


def test_a_trusted_proxy_count_without_the_proxy_setting_is_refused():
    from tests.processes import run_manage

    done = run_manage("check", GUARDIAN_TRUSTED_PROXY_COUNT="1", BEHIND_TLS_PROXY="false")
    assert done.returncode != 0
    assert "GUARDIAN_TRUSTED_PROXY_COUNT is set but BEHIND_TLS_PROXY is not" in done.stderr
