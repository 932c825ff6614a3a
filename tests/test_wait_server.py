"""The wait server (runs/wait_server.py, `manage.py wait_server`), a real process on 127.0.0.1:
a thousand callers held at once on a handful of threads, each woken by the announcement of a
verdict recorded through the reviewer's service, or by its poll when that announcement is
lost; a timeout answers "open"; every other answer is the API view's own."""

import asyncio
import contextlib
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.urls import reverse
from guardian_client import Call, Guardian
from rest_framework.test import APIClient

from escalations.verdicts import escalation_resolve
from guardian_core.services import api_token_create
from runs.wait_server import WAIT_PATH
from tests.client_helpers import (
    LOOKUP_ORDER,
    REFUND_ORDER,
    approve_when_held,
    guardian_for,
    run_async,
    scripted,
)
from tests.mcp_upstreams.launch import free_port
from tests.processes import REPO, child_env
from tests.test_external_runs import api, refund, start, step  # noqa: F401 - api: a fixture
from tests.test_worker_runs import worker_env

pytestmark = pytest.mark.django_db(transaction=True)

# The announcing server's poll: far above any wake it is credited with.
SLOW_POLL_SECONDS = 20.0
# The server that must find a verdict by its poll alone.
QUICK_POLL_SECONDS = 1.0
DB_THREADS = 4
needs_redis = pytest.mark.skipif(
    not settings.GUARDIAN_WAIT_REDIS_URL,
    reason="no Redis to announce verdicts on (the embedded default's broker is files)",
)


@contextlib.contextmanager
def wait_server(poll_seconds: float):
    """`manage.py wait_server` on a free port of 127.0.0.1, on this test's database."""
    port = free_port()
    env = worker_env(
        GUARDIAN_WAIT_FALLBACK_SECONDS=str(poll_seconds),
        GUARDIAN_WAIT_DB_THREADS=str(DB_THREADS),
        GUARDIAN_ALLOW_SCRIPTED_ADAPTERS="true",
    )
    log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "manage.py", "wait_server", "--port", str(port)],
        cwd=REPO,
        env=child_env(**env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise AssertionError(f"the wait server did not start: {log.read()}")
            time.sleep(0.1)
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _healthy(url: str) -> dict | None:
    with contextlib.suppress(httpx.TransportError):
        response = httpx.get(f"{url}/healthz", timeout=2)
        if response.status_code == 200:
            return response.json()
    return None


@pytest.fixture(scope="module")
def announcing(django_db_setup):
    with wait_server(SLOW_POLL_SECONDS) as server:
        yield server


@pytest.fixture(scope="module")
def polling(django_db_setup):
    with wait_server(QUICK_POLL_SECONDS) as server:
        yield server


def _held(api) -> int:  # noqa: F811 - the fixture's value
    """A held refund of a new external run of the token's: its escalation's id."""
    run = start(api)
    return step(api, run["id"], 0, refund())["escalation"]["id"]


def _token(api) -> str:  # noqa: F811
    return api._credentials["HTTP_AUTHORIZATION"].split()[1]


def _threads(process: subprocess.Popen) -> int:
    status = Path(f"/proc/{process.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Threads:")).split()[1])


def _approve_in_a_thread(escalation_id: int, reviewer) -> None:
    """The reviewer's service, as the queue calls it, from a thread of its own (the test's
    loop goes on serving its callers); its announcement goes out once the verdict commits."""
    try:
        escalation_resolve(escalation_id=escalation_id, reviewer=reviewer, decision="approve")
    finally:
        connection.close()


async def _waiting(url: str, count: int, *, within: float) -> None:
    deadline = time.monotonic() + within
    async with httpx.AsyncClient() as client:
        while (await client.get(f"{url}/healthz")).json()["waiting"] < count:
            assert time.monotonic() < deadline, f"fewer than {count} callers held"
            await asyncio.sleep(0.05)


def test_the_path_is_the_apis_own(api):  # noqa: F811
    assert WAIT_PATH.fullmatch(reverse("api:escalation-wait", args=[12]))["pk"] == "12"
    assert WAIT_PATH.fullmatch("/api/escalations/12/wait/") is None


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_thousand_waiting_callers_hold_a_handful_of_threads_and_all_hear_the_verdict(
    api,  # noqa: F811
    reviewer,
    announcing,
    polling,
):
    # Without Redis the verdict reaches them by the poll: the quick one then.
    url, process = announcing if settings.GUARDIAN_WAIT_REDIS_URL else polling
    escalations = [_held(api), _held(api)]
    headers = {"Authorization": f"Bearer {_token(api)}"}
    figures = {}

    async def scene() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
        async with httpx.AsyncClient(
            base_url=url, headers=headers, limits=limits, timeout=60
        ) as client:
            held = [
                asyncio.create_task(
                    client.get(f"/api/escalations/{escalations[n % 2]}/wait?timeout=25")
                )
                for n in range(1000)
            ]
            started = time.monotonic()
            await _waiting(url, 1000, within=40)
            figures["all held after"] = time.monotonic() - started
            figures["threads"] = _threads(process)
            # Another caller is answered at once meanwhile: the loop is not stuck.
            asked = time.monotonic()
            other = await client.get(f"/api/escalations/{escalations[1]}/wait?timeout=0")
            figures["another wait answered in"] = time.monotonic() - asked
            assert (other.status_code, other.json()["status"]) == (200, "open")
            assert not any(task.done() for task in held)
            decided = time.monotonic()
            for escalation_id in escalations:
                await asyncio.to_thread(_approve_in_a_thread, escalation_id, reviewer)
            answers = await asyncio.gather(*held)
            figures["all 1000 answered after the verdicts in"] = time.monotonic() - decided
            return answers

    answers = run_async(scene)
    print(figures)  # the README's figures (pytest -s)
    assert {(a.status_code, a.json()["decision"]) for a in answers} == {(200, "approve")}
    assert {a.json()["escalation"] for a in answers} == set(escalations)
    # The loop, the database threads, and a few of asyncio's own (its address look-ups): no
    # thread per caller (gunicorn's gthread worker would need a thousand).
    assert figures["threads"] <= DB_THREADS + 8, figures
    assert figures["another wait answered in"] < 1.0, figures


@needs_redis
def test_a_verdict_wakes_its_caller_by_its_announcement_long_before_the_poll(
    api,  # noqa: F811
    reviewer,
    announcing,
):
    url, _process = announcing
    escalation_id = _held(api)
    headers = {"Authorization": f"Bearer {_token(api)}"}

    async def scene() -> tuple[httpx.Response, float]:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            waiting = asyncio.create_task(
                client.get(f"/api/escalations/{escalation_id}/wait?timeout=25")
            )
            await _waiting(url, 1, within=20)
            await asyncio.to_thread(_approve_in_a_thread, escalation_id, reviewer)
            committed = time.monotonic()
            answer = await waiting
            return answer, time.monotonic() - committed

    answer, latency = run_async(scene)
    print(f"woken {latency * 1000:.0f} ms after the verdict committed")
    body = answer.json()
    assert (answer.status_code, body["status"], body["decision"]) == (200, "resolved", "approve")
    assert body["resumed"]["step"] == 1  # the approved step, opened for the caller as on the API
    assert latency < 1.0 < SLOW_POLL_SECONDS


def test_a_lost_announcement_still_ends_with_the_verdict_by_the_poll(
    api,  # noqa: F811
    reviewer,
    polling,
    settings,
):
    url, _process = polling
    escalation_id = _held(api)
    settings.GUARDIAN_WAIT_REDIS_URL = ""  # this verdict's announcement never goes out
    headers = {"Authorization": f"Bearer {_token(api)}"}

    async def scene() -> tuple[httpx.Response, float]:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            waiting = asyncio.create_task(
                client.get(f"/api/escalations/{escalation_id}/wait?timeout=25")
            )
            await _waiting(url, 1, within=20)
            await asyncio.to_thread(_approve_in_a_thread, escalation_id, reviewer)
            committed = time.monotonic()
            answer = await waiting
            return answer, time.monotonic() - committed

    answer, waited = run_async(scene)
    assert (answer.status_code, answer.json()["decision"]) == (200, "approve")
    assert waited < QUICK_POLL_SECONDS + 2.0  # by the poll, not at the timeout


def test_a_wait_that_times_out_answers_open(api, announcing):  # noqa: F811
    url, _process = announcing
    escalation_id = _held(api)
    headers = {"Authorization": f"Bearer {_token(api)}"}
    started = time.monotonic()
    answer = httpx.get(
        f"{url}/api/escalations/{escalation_id}/wait?timeout=1", headers=headers, timeout=30
    )
    waited = time.monotonic() - started
    body = answer.json()
    assert (answer.status_code, body["status"], body["decision"]) == (200, "open", None)
    assert 1.0 <= waited < 5.0


def test_every_other_answer_is_the_api_views_own(api, announcing, django_user_model):  # noqa: F811
    url, _process = announcing
    escalation_id = _held(api)
    someone = django_user_model.objects.create_user("someone_else")  # holds no role
    _, stranger = api_token_create(user=someone, name="stranger")
    token = _token(api)
    path = reverse("api:escalation-wait", args=[escalation_id])
    cases = [
        ({"Authorization": f"Bearer {token}"}, "?timeout=31"),
        ({"Authorization": f"Bearer {token}", "Accept-Language": "fr"}, "?timeout=soon"),
        ({"Authorization": f"Bearer {token}"}, "?timeout=0", escalation_id + 1000),
        ({}, "?timeout=0"),
        ({"Authorization": "Bearer not-a-token"}, "?timeout=0"),
        ({"Authorization": f"Bearer {stranger}"}, "?timeout=0"),
    ]
    for headers, query, *other in cases:
        where = reverse("api:escalation-wait", args=[other[0]]) if other else path
        served = httpx.get(f"{url}{where}{query}", headers=headers, timeout=30)
        django_headers = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
        expected = APIClient().get(f"{where}{query}", **django_headers)
        assert (served.status_code, served.json()) == (expected.status_code, expected.json())
    french = httpx.get(
        f"{url}{path}?timeout=soon",
        headers={"Authorization": f"Bearer {token}", "Accept-Language": "fr"},
        timeout=30,
    ).json()
    assert list(french) == ["timeout"]  # the bad field named, in the caller's language
    assert "'soon'" in french["timeout"][0]
    assert not french["timeout"][0].startswith("a number of seconds")
    assert httpx.get(f"{url}/api/runs/", timeout=30).status_code == 404


def test_the_client_waits_where_the_step_answer_says_and_hears_the_verdict_there(
    live_server, integrator, reviewer, announcing, polling, settings
):
    url, _process = announcing if settings.GUARDIAN_WAIT_REDIS_URL else polling
    settings.GUARDIAN_WAIT_URL = url
    token = guardian_for(integrator)
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(
            goal="Refund order ord_1: the parcel arrived broken.",
            tools=[LOOKUP_ORDER, REFUND_ORDER],
            guardian="scripted",
            config=scripted({}, {}, {}),
        )
        gate = run.before(
            calls=[Call("refund_order", {"order_id": "ord_1", "amount": 49.9}, call_id="c2")]
        )
        assert gate.escalation.wait_url == f"{url}/api/escalations/{gate.escalation.id}/wait"
        # Held on the wait server (its count says so) until the reviewer decides.
        seen = []
        watcher = threading.Thread(
            target=lambda: seen.append(asyncio.run(_waiting(url, 1, within=20)))
        )
        watcher.start()
        approve_when_held(reviewer, delay=1.0)
        verdict = run.wait(gate.escalation.id, timeout=20, poll=10)  # by id: the run knows where
        watcher.join()
    assert seen == [None]
    assert (verdict.decision, verdict.resumed.status) == ("approve", "run")
