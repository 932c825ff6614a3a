"""`manage.py verify_log` and the run page's "Verify chain" count in words that agree with
their numbers: one decision, two decisions; one run, two runs."""

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from tests.factories import make_decision, make_run, make_turn, tamper

pytestmark = pytest.mark.django_db


def run_with_decisions(count: int):
    run = make_run()
    for index in range(count):
        make_decision(turn=make_turn(run=run, index=index))
    return run


def test_verify_log_says_one_decision_and_one_run(capsys):
    run = run_with_decisions(1)
    call_command("verify_log", str(run.pk))
    out = capsys.readouterr().out
    assert f"run {run.pk}: 1 decision, chain intact, head " in out
    assert "1 run checked, the chain intact" in out
    assert "decisions" not in out
    assert "runs" not in out


def test_verify_log_says_decisions_and_runs_in_the_plural(capsys):
    runs = [run_with_decisions(2), run_with_decisions(0)]
    call_command("verify_log", "--all")
    out = capsys.readouterr().out
    assert f"run {runs[0].pk}: 2 decisions, chain intact" in out
    assert f"run {runs[1].pk}: 0 decisions, chain intact, head (none yet)" in out
    assert "2 runs checked, every chain intact" in out


def test_verify_log_says_one_broken_run_has_a_broken_chain(capsys):
    run = run_with_decisions(2)
    tamper(
        "UPDATE runs_decision SET outcome = 'stop_success' WHERE turn_id IN "
        '(SELECT id FROM runs_turn WHERE run_id = %s AND "index" = 1)',
        [run.pk],
    )
    with pytest.raises(CommandError) as error:
        call_command("verify_log", str(run.pk))
    assert str(error.value) == "1 of 1 run has a broken chain"
    assert f"BROKEN run {run.pk} turn 1:" in capsys.readouterr().err


def test_the_verify_button_says_one_decision(client, auditor):
    run = run_with_decisions(1)
    client.force_login(auditor)
    body = client.get(reverse("runs:verify", args=[run.pk])).content.decode()
    assert "Chain intact: 1 decision;" in body
    two = run_with_decisions(2)
    body = client.get(reverse("runs:verify", args=[two.pk])).content.decode()
    assert "Chain intact: 2 decisions;" in body
