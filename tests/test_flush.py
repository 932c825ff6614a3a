"""Django's flush empties a database that holds the append-only log, through the log's purge
(runs/management/commands/flush.py), on both databases: `manage.py flush`, and the teardown
of every transactional test, which would otherwise leave its rows to the next test."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import IntegrityError, transaction

from escalations.models import LabelledExample, Verdict
from runs.models import Decision
from tests.factories import make_decision, make_escalation

USERNAME = "flush-probe"


def _log_rows(username: str) -> Decision:
    """A decision, a verdict and a labelled example: the rows only a purge may delete."""
    reviewer = get_user_model().objects.create_user(username=username)
    decision = make_decision()
    escalation = make_escalation(turn=decision.turn)
    verdict = Verdict.objects.create(escalation=escalation, decision="approve", reviewer=reviewer)
    LabelledExample.objects.create(
        condition="integrity",
        projection={"goal": "g"},
        label=True,
        source="human",
        question_set_version="q",
        model_version="m",
        verdict=verdict,
    )
    return decision


def _log_counts() -> tuple[int, int, int]:
    return Decision.objects.count(), Verdict.objects.count(), LabelledExample.objects.count()


@pytest.mark.django_db(transaction=True)  # as manage.py flush runs: in no outer transaction
def test_flush_empties_the_log_and_the_log_is_append_only_again_after_it():
    _log_rows(USERNAME)
    call_command("flush", interactive=False, verbosity=0)
    assert _log_counts() == (0, 0, 0)
    assert not get_user_model().objects.exists()
    # The purge ended with the flush: deleting outside one is refused again.
    decision = make_decision()
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        Decision.objects.filter(pk=decision.pk).delete()


@pytest.mark.django_db
def test_an_interactive_flush_answered_no_deletes_nothing(monkeypatch, capsys):
    _log_rows(USERNAME)
    questions = []
    monkeypatch.setattr("builtins.input", lambda question: questions.append(question) or "no")
    call_command("flush", verbosity=0)
    assert "the decision log included" in questions[0]
    assert "Flush cancelled." in capsys.readouterr().out
    assert _log_counts() == (1, 1, 1)


# The next two run in this order (pytest keeps a file's order, and pytest-django keeps
# transactional tests together): the second needs the first's teardown flush to have worked.
@pytest.mark.django_db(transaction=True)
def test_a_transactional_test_writes_to_the_log():
    _log_rows(USERNAME)
    assert _log_counts() == (1, 1, 1)


@pytest.mark.django_db(transaction=True)
def test_the_next_transactional_test_starts_from_an_empty_database():
    assert _log_counts() == (0, 0, 0)
    _log_rows(USERNAME)  # the same username: refused if the last test's rows were left
