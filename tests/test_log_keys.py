"""The decision log's key (runs/chain.py): from GUARDIAN_LOG_KEY or derived from SECRET_KEY
under a label of its own, refused when short outside DEBUG, named by an id that tells nothing
of it. No database."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from runs import chain


def test_the_derived_key_is_not_the_secret_key_and_changes_with_it(settings):
    settings.GUARDIAN_LOG_KEY = ""
    settings.SECRET_KEY = "s" * 50
    derived = chain.log_keys()
    assert derived.current != settings.SECRET_KEY.encode()
    settings.SECRET_KEY = "t" * 50
    assert chain.log_keys().current_id != derived.current_id


def test_an_explicit_key_wins_and_its_id_is_not_the_key(settings):
    settings.GUARDIAN_LOG_KEY = "k" * 40
    keys = chain.log_keys()
    assert keys.current == b"k" * 40
    assert len(keys.current_id) == 16
    assert "k" not in keys.current_id


@pytest.mark.parametrize("where", ["GUARDIAN_LOG_KEY", "SECRET_KEY"])
def test_a_short_key_is_refused_outside_debug_and_named(settings, where):
    settings.DEBUG = False
    settings.GUARDIAN_LOG_KEY = "short" if where == "GUARDIAN_LOG_KEY" else ""
    settings.SECRET_KEY = "short" if where == "SECRET_KEY" else "s" * 50
    with pytest.raises(ImproperlyConfigured, match=f"{where}.* at least 32"):
        chain.check_log_key()
    settings.DEBUG = True
    chain.check_log_key()  # a development machine may use anything


def test_a_seal_made_under_another_key_does_not_verify(settings):
    content = {"run": "r", "turn": 0}
    settings.GUARDIAN_LOG_KEY = "a" * 32
    sealed = chain.decision_mac(content, chain.log_keys().current)
    settings.GUARDIAN_LOG_KEY = "b" * 32
    assert chain.decision_mac(content, chain.log_keys().current) != sealed
