"""ask_concurrently: every question at once, nothing waits past the deadline, failures become
Malformed answers (pure, no database)."""

import os
import threading
import time

import pytest

from guardian_core.adapters import timing
from guardian_core.adapters.timing import ask_concurrently
from guardian_core.engine.conditions import Malformed

# Generous: the slow questions here take 10 s, so only waiting for them can exceed it.
SLACK_SECONDS = 2.0


@pytest.fixture
def release():
    """An event that stuck questions wait on, set at the end so no thread outlives the test."""
    event = threading.Event()
    yield event
    event.set()


def test_fast_questions_return_their_values_by_key_in_order():
    answers = ask_concurrently(
        {"b": lambda: 0.2, "a": lambda: {"0": 1.0}, "c": lambda: None}, deadline_seconds=2
    )

    assert answers == {"b": 0.2, "a": {"0": 1.0}, "c": None}
    assert list(answers) == ["b", "a", "c"]


def test_a_slow_question_times_out_and_the_call_returns_by_the_deadline(release):
    start = time.monotonic()
    answers = ask_concurrently(
        {"slow": lambda: release.wait(10), "fast": lambda: 0.1}, deadline_seconds=0.3
    )
    elapsed = time.monotonic() - start

    assert elapsed < 0.3 + SLACK_SECONDS
    assert answers["fast"] == 0.1
    assert isinstance(answers["slow"], Malformed)
    assert "timed out" in answers["slow"].reason
    assert "0.3 s" in answers["slow"].reason


def test_questions_run_concurrently_not_one_after_another():
    start = time.monotonic()
    answers = ask_concurrently(
        {n: (lambda: time.sleep(1.0) or "ok") for n in range(6)}, deadline_seconds=4
    )

    # One after another would take 6 s; the margin is wide so a busy machine cannot flake it.
    assert time.monotonic() - start < 3.0
    assert set(answers.values()) == {"ok"}


def test_a_raising_question_becomes_malformed_naming_the_exception():
    def broken() -> float:
        raise ValueError("the model said 'maybe'")

    answers = ask_concurrently({"integrity": broken, "drift": lambda: 0.5}, deadline_seconds=2)

    assert answers["drift"] == 0.5
    assert isinstance(answers["integrity"], Malformed)
    assert answers["integrity"].reason == "guardian error: ValueError: the model said 'maybe'"


def test_every_question_times_out_at_a_zero_deadline(release):
    answers = ask_concurrently({"a": lambda: release.wait(10)}, deadline_seconds=0)

    assert isinstance(answers["a"], Malformed)
    assert "timed out" in answers["a"].reason


def test_no_questions_give_no_answers():
    assert ask_concurrently({}, deadline_seconds=1) == {}


# ---- the threads questions run in, kept between calls -------------------------------------------


@pytest.fixture
def small_pool(monkeypatch):
    """A fresh shared pool of two threads (timing.MAX_WORKERS) for this test only."""
    monkeypatch.setattr(timing, "MAX_WORKERS", 2)
    monkeypatch.setattr(timing, "_pool", None)
    yield
    pool = timing._pool
    if pool is not None:
        pool[1].shutdown(wait=False)


def test_calls_reuse_the_threads_of_the_calls_before(small_pool):
    threads = [
        ask_concurrently({"a": threading.current_thread}, deadline_seconds=2)["a"] for _ in range(3)
    ]

    # Starting a thread per call cost as much as a local guardian's answer (issue 27).
    assert threads[0] is threads[1] is threads[2]
    assert threads[0] is not threading.current_thread()


def test_a_question_stalled_past_its_deadline_holds_up_no_later_call(small_pool, release):
    stalled = ask_concurrently(
        {n: (lambda: release.wait(10)) for n in range(2)}, deadline_seconds=0.2
    )
    # Both threads of the pool are still stuck: a later call gets threads of its own.
    start = time.monotonic()
    later = ask_concurrently({"fast": lambda: 0.7}, deadline_seconds=2)

    assert all(isinstance(answer, Malformed) for answer in stalled.values())
    assert later == {"fast": 0.7}
    assert time.monotonic() - start < 2


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() with threads running
def test_a_forked_process_answers_with_threads_of_its_own(small_pool):
    # The parent's pool holds an idle thread; a forked child inherits the pool, not the thread.
    ask_concurrently({"a": lambda: 1}, deadline_seconds=2)
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, say what came back, leave at once
        try:
            answer = ask_concurrently({"a": lambda: 0.4}, deadline_seconds=1)["a"]
            os.write(writer, repr(answer).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as said:
        answer = said.read()
    os.waitpid(pid, 0)

    assert answer == "0.4"


def test_slow_questions_of_other_calls_do_not_make_a_call_miss_its_deadline():
    # Eight calls at once (a threaded web worker's turns), each with six network questions
    # of 1 s under a 1.5 s deadline: one queued behind another call's would start after 1 s
    # and end past its deadline, a Malformed answer that escalates the turn.
    results = []

    def one_call() -> None:
        questions = {n: (lambda: time.sleep(1.0) or "ok") for n in range(6)}
        results.append(ask_concurrently(questions, deadline_seconds=1.5))

    callers = [threading.Thread(target=one_call) for _ in range(8)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()

    assert len(results) == 8
    assert [sorted(set(map(repr, answers.values()))) for answers in results] == [["'ok'"]] * 8
