"""Decision replay spread over processes (runs/replay_parallel.py): the same lines in the same
order as in one process, on logs that differ; a child's failure named with a non-zero exit.

The children are forked and open connections of their own: they see only committed rows, hence
transactional tests. Segments are made small so that runs of a few hundred turns are cut."""

import re

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from bench.replay import fill
from runs import replay_parallel, replay_views
from runs.models import Decision
from runs.replay import run_replay
from tests.factories import tamper_rows

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def small_segments(monkeypatch):
    monkeypatch.setattr(replay_parallel, "MIN_SEGMENT", 60)
    # An earlier test may leave the guardian's deadline pool with an idle thread in this
    # process; `manage.py replay` has none. Forking here is safe: that thread holds no lock.
    monkeypatch.setattr(replay_parallel, "_single_threaded", lambda: True)
    forks = []
    real = replay_parallel.ProcessPoolExecutor

    def counted(*args, **kwargs):
        forks.append(kwargs["max_workers"])
        return real(*args, **kwargs)

    monkeypatch.setattr(replay_parallel, "ProcessPoolExecutor", counted)
    return forks


@pytest.fixture
def differing_runs():
    """Two long runs whose logs differ from what `decide` gives: an outcome changed, the
    thresholds in force changed on a stretch (as under another policy), and a malformed row
    on a replanned turn (replay passes over it, so every later segment's guessed replan count
    is one too many and must be replayed again)."""
    first, second = fill(400), fill(300)
    tamper_rows(
        Decision.objects.filter(turn__run_id=first, turn__index=150), outcome="stop_failure"
    )
    tamper_rows(
        Decision.objects.filter(turn__run_id=first, turn__index__range=(200, 210)),
        thresholds={"drift": {"t_star": 0.5}},
    )
    replanned = (
        Decision.objects.filter(turn__run_id=second, outcome="replan", turn__index__lt=100)
        .order_by("turn__index")
        .first()
    )
    assert replanned is not None
    tamper_rows(Decision.objects.filter(pk=replanned.pk), answers=[])
    return first, second


def _replay(*args):
    """The command's stdout (its timing left out) and exit code."""
    from io import StringIO

    out, err = StringIO(), StringIO()
    try:
        call_command("replay", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    return re.sub(r" in [0-9.]+ s:", " in N s:", out.getvalue()), err.getvalue(), code


def test_parallel_and_one_worker_replay_print_the_same_differences_in_order(
    differing_runs, small_segments
):
    assert replay_parallel.parallel_possible()
    one, one_err, one_code = _replay("--all", "--workers", "1")
    two, two_err, two_code = _replay("--all", "--workers", "2")
    assert small_segments == [2]  # the second replay forked two workers
    assert one_code == two_code == 1
    assert two == one
    assert two_err == one_err
    first, second = differing_runs
    assert f"run {first} turn 150: DIFFERENT: outcome: stop_failure → " in one
    assert f"run {first} turn 205: DIFFERENT: thresholds in force differ" in one
    assert "DIFFERENT: malformed log row: answers is not an object" in one
    # Every differing line, in order of run then turn.
    where = [tuple(map(int, m)) for m in re.findall(r"run (\d+) turn (\d+): DIFFERENT", one)]
    assert where == sorted(where)
    assert len(where) >= 13


def test_one_run_replayed_in_parallel_prints_every_turn_as_one_process_does(
    differing_runs, small_segments
):
    first, second = differing_runs
    for run_id in (first, second):
        one = _replay(str(run_id), "--workers", "1")
        two = _replay(str(run_id), "--workers", "2")
        assert two == one
        assert one[0].count(f"run {run_id} turn ") >= 300
    assert small_segments == [2, 2]


def test_the_run_page_replays_a_late_page_over_processes_with_the_same_turns(
    differing_runs, small_segments, client, auditor, monkeypatch
):
    from runs.models import Run

    _, second = differing_runs
    run = Run.objects.select_related("policy_version").get(pk=second)
    alone = list(run_replay(run=run, start_index=180, limit=101))
    spread = replay_parallel.replay_page(run=run, start_index=180, limit=101, workers=2)
    assert spread == alone
    assert small_segments == [2]
    monkeypatch.setattr(replay_views, "PARALLEL_PAGE_FROM", 100)
    client.force_login(auditor)
    response = client.get(reverse("runs:replay", args=[second]), {"from": 180})
    assert response.status_code == 200
    assert small_segments == [2, 2]


def test_a_failure_in_a_child_is_named_and_ends_the_replay_non_zero(
    differing_runs, small_segments, monkeypatch
):
    first, _ = differing_runs
    real = replay_parallel.replay_rows

    def breaks(*, run_id, **kwargs):
        if run_id == first:
            raise RuntimeError("the disk went away")
        return real(run_id=run_id, **kwargs)

    monkeypatch.setattr(replay_parallel, "replay_rows", breaks)
    with pytest.raises(
        CommandError,
        match=rf"run {first} turns 0–\d+: replay failed: "
        "RuntimeError: the disk went away",
    ) as error:
        call_command("replay", "--all", "--workers", "2")
    assert error.value.returncode == 1
    assert small_segments == [2]


@pytest.mark.parametrize("bad", ["0", "-3", "two", "1.5"])
def test_workers_must_be_a_whole_number_of_at_least_one_and_the_bad_value_is_named(bad):
    with pytest.raises(
        CommandError,
        match=rf"--workers: must be a whole number of at least 1, not '{re.escape(bad)}'",
    ):
        call_command("replay", "--all", "--workers", bad)
