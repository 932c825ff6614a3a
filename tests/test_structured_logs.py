"""Structured logs (GUARDIAN_LOG_FORMAT): the plain lines stay the default; the JSON lines of a
real web process (gunicorn) and a real worker parse, carry the run's id on both sides, and the
worker's lines of a task carry the id of the request that enqueued it."""

import json
import re
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

from demo.setup import demo_policy_version
from guardian_core.services import api_token_create
from runs.models import Run
from tests.processes import REPO, child_env, start_worker, stop_worker
from tests.runs_helpers import scripted_scenario
from tests.test_worker_runs import worker_env

PLAIN_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING guardian.test: hello 7$")


def _log_from_a_child(code: str, **env: str | None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python process with Django set up (its logging configured)."""
    setup = "import django; django.setup()\n"
    return subprocess.run(
        [sys.executable, "-c", setup + code],
        cwd=REPO,
        env=child_env(DJANGO_SETTINGS_MODULE="guardian_core.settings", **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_plain_format_is_the_default_and_writes_the_lines_it_always_wrote():
    shown = _log_from_a_child(
        "from django.conf import settings; import logging; "
        "print(settings.GUARDIAN_LOG_FORMAT); "
        "logging.getLogger('guardian.test').warning('hello %s', 7)",
        GUARDIAN_LOG_FORMAT=None,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "plain"
    [line] = [line for line in shown.stderr.splitlines() if "guardian.test" in line]
    assert PLAIN_LINE.match(line), line


def test_an_unknown_format_is_refused_at_start():
    shown = _log_from_a_child("pass", GUARDIAN_LOG_FORMAT="xml")
    assert shown.returncode != 0
    assert "GUARDIAN_LOG_FORMAT='xml'" in shown.stderr


def test_json_lines_carry_the_bound_ids_and_a_403_keeps_no_traceback():
    shown = _log_from_a_child(
        "import logging\n"
        "from guardian_core.logs import log_context\n"
        "with log_context(run_id=12, turn=3, escalation_id=None):\n"
        "    logging.getLogger('runs.x').info(\n"
        "        'decided %s', 'continue', extra={'outcome': 'continue'}\n"
        "    )\n"
        "logging.getLogger('runs.x').info('after')\n"
        "refused = (PermissionError, PermissionError('no'), None)\n"
        "logging.getLogger('django.request').warning('Forbidden: /runs/', exc_info=refused, "
        "extra={'status_code': 403})\n"
        "logging.getLogger('django.request').error('Internal Server Error: /x', exc_info=refused, "
        "extra={'status_code': 500})\n",
        GUARDIAN_LOG_FORMAT="json",
    )
    assert shown.returncode == 0, shown.stderr
    decided, after, forbidden, failed = [json.loads(line) for line in shown.stderr.splitlines()]
    assert decided["event"] == "decided continue"
    assert (decided["run_id"], decided["turn"], decided["outcome"]) == (12, 3, "continue")
    assert decided["level"] == "info"
    assert decided["logger"] == "runs.x"
    assert decided["timestamp"]
    assert "escalation_id" not in decided  # unknown ids are left out, not null
    assert "run_id" not in after  # the block's ids end with it
    assert forbidden["status_code"] == 403
    assert "exception" not in forbidden
    assert "PermissionError: no" in failed["exception"]


# ---- a real web process and a real worker --------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_web(port: int, **env: str) -> tuple[subprocess.Popen, "tempfile._TemporaryFileWrapper"]:
    """gunicorn as production starts it (threads), with Guardian's gunicorn settings."""
    log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115 - closed by caller
    command = [sys.executable, "-m", "gunicorn", "guardian_core.wsgi:application"]
    command += ["-c", "python:guardian_core.gunicorn_conf", "--bind", f"127.0.0.1:{port}"]
    command += ["--workers", "1", "--worker-class", "gthread", "--threads", "2"]
    web = subprocess.Popen(
        command, cwd=REPO, env=child_env(**env), stdout=log, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if web.poll() is not None:
            log.seek(0)
            raise AssertionError(f"gunicorn exited with {web.returncode}: {log.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return web, log
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    web.kill()
    raise AssertionError("gunicorn did not answer within 60 s")


def _stop_web(web: subprocess.Popen, log) -> str:
    if web.poll() is None:
        web.terminate()
    try:
        web.wait(timeout=20)
    except subprocess.TimeoutExpired:
        web.kill()
        web.wait()
    with log:
        log.seek(0)
        return log.read()


def _json_lines(output: str, where: str) -> list[dict]:
    lines = []
    for line in output.splitlines():
        if not line.strip():
            continue
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            raise AssertionError(f"a line of the {where} is not JSON: {line!r}") from None
    return lines


def _wait_for_status(client: httpx.Client, url: str, headers: dict, done) -> dict:
    deadline = time.monotonic() + 90
    body: dict = {}
    while time.monotonic() < deadline:
        body = client.get(url, headers=headers).json()
        if done(body):
            return body
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting on {url}: last answer {body}")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_runs_story_is_followed_by_its_id_across_the_web_and_the_worker(admin, reviewer, auditor):
    demo_policy_version()
    _, admin_secret = api_token_create(user=admin, name="operator")
    _, reviewer_secret = api_token_create(user=reviewer, name="review bot")
    _, auditor_secret = api_token_create(user=auditor, name="audit bot")
    as_admin = {"Authorization": f"Bearer {admin_secret}", "X-Request-ID": "start-req-0001"}
    as_reviewer = {"Authorization": f"Bearer {reviewer_secret}"}
    as_auditor = {"Authorization": f"Bearer {auditor_secret}"}
    scenario = scripted_scenario("refund_waits_for_approval")
    scripted = {key: value for key, value in scenario.items() if key != "expect"}
    env = worker_env(
        GUARDIAN_LOG_FORMAT="json",
        GUARDIAN_DEADLINE_SECONDS="600",
        GUARDIAN_ALLOW_SCRIPTED_ADAPTERS="true",
    )

    port = _free_port()
    web, web_log = _start_web(port, **env)
    worker = start_worker(**env)
    web_output = worker_output = ""
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            started = client.post(
                "/api/runs/start/",
                json={
                    "goal": scenario["goal"],
                    "acceptance_criteria": scenario["acceptance_criteria"],
                    "tools": scenario["tools"],
                    "actor": "scripted",
                    "guardian": "scripted",
                    "budgets": scenario["budgets"],
                    "config": {"scenario": scripted},
                },
                headers=as_admin,
            )
            assert started.status_code == 201, started.text
            # The caller's request id comes back as given.
            assert started.headers["X-Request-ID"] == "start-req-0001"
            run_id = started.json()["id"]
            run_url = f"/api/runs/{run_id}/"
            _wait_for_status(client, run_url, as_auditor, lambda run: run["status"] == "waiting")

            listed = client.get("/api/escalations/", headers=as_reviewer).json()
            [escalation] = [e for e in listed["results"] if e["run"] == run_id]
            base = f"/api/escalations/{escalation['id']}/"
            [held] = client.post(f"{base}claim/", headers=as_reviewer).json()["held_calls"]
            resolved = client.post(
                f"{base}resolve/",
                json={
                    "decision": "approve",
                    "seen_hashes": {str(held["position"]): held["action_hash"]},
                },
                headers=as_reviewer,
            )
            assert resolved.status_code == 200, resolved.text
            # No id given: one is made, and returned.
            verdict_request = resolved.headers["X-Request-ID"]
            assert re.fullmatch(r"[0-9a-f]{32}", verdict_request)
            run = _wait_for_status(
                client, run_url, as_auditor, lambda run: run["status"] != "running"
            )
            assert run["status"] == "succeeded"
    finally:
        worker_output = stop_worker(worker)
        web_output = _stop_web(web, web_log)

    web_lines = _json_lines(web_output, "web process")
    worker_lines = _json_lines(worker_output, "worker")
    assert Run.objects.get(pk=run_id).status == "succeeded"

    # The web: the run started under the caller's request id, by its user; the verdict.
    [run_started] = [line for line in web_lines if line["event"].startswith(f"run {run_id} ")]
    assert run_started["request_id"] == "start-req-0001"
    assert run_started["user_id"] == admin.pk
    [verdict] = [line for line in web_lines if line["event"].startswith("verdict on escalation")]
    assert (verdict["run_id"], verdict["escalation_id"]) == (run_id, escalation["id"])
    assert (verdict["request_id"], verdict["user_id"]) == (verdict_request, reviewer.pk)
    assert verdict["decision"] == "approve"
    requests = [line for line in web_lines if line["logger"] == "guardian.request"]
    assert {"path": "/api/runs/start/", "status": 201, "request_id": "start-req-0001"}.items() <= (
        next(line for line in requests if line["path"] == "/api/runs/start/").items()
    )

    # The worker: every turn of the run, each under the request id that enqueued it.
    run_lines = [line for line in worker_lines if line.get("run_id") == run_id]
    decided = [line for line in run_lines if line.get("outcome")]
    assert decided, worker_output
    assert all(line["model_version"] for line in decided)
    assert [line["turn"] for line in decided] == list(range(len(decided)))
    before_verdict = [line for line in decided if line["turn"] <= escalation["turn_index"]]
    after_verdict = [line for line in decided if line["turn"] > escalation["turn_index"]]
    assert before_verdict
    assert after_verdict
    assert {line["request_id"] for line in before_verdict} == {"start-req-0001"}
    assert {line["request_id"] for line in after_verdict} == {verdict_request}
    [opened] = [line for line in run_lines if line["event"].startswith("escalation ")]
    assert (opened["escalation_id"], opened["request_id"]) == (escalation["id"], "start-req-0001")
    assert opened["kind"] == escalation["kind"]
    # Celery's own lines of the run's tasks carry the ids too (the task's "succeeded" line).
    assert any(
        line["logger"] == "celery.app.trace" and line.get("request_id") == "start-req-0001"
        for line in run_lines
    )


# ---- the ids, bound ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_request_id_that_could_forge_a_line_is_replaced_by_a_new_one(client):
    given = client.get("/healthz", headers={"X-Request-ID": "abc-123.x:y_z"})
    assert given.headers["X-Request-ID"] == "abc-123.x:y_z"
    forged = client.get("/healthz", headers={"X-Request-ID": 'x" "run_id": 1'})
    assert re.fullmatch(r"[0-9a-f]{32}", forged.headers["X-Request-ID"])
    assert client.get("/healthz").headers["X-Request-ID"] != forged.headers["X-Request-ID"]


class _Request:
    def __init__(self, task_id: str, **headers: str) -> None:
        self.id, self.headers = task_id, headers
        for name, value in headers.items():
            setattr(self, name, value)


class _Task:
    name = "runs.advance_run"

    def __init__(self, request: _Request) -> None:
        self.request = request

    def run(self, run_id: int, escalation_id: int | None = None, event: str = "") -> None:
        pass


def test_a_task_binds_the_ids_its_arguments_name_and_the_request_id_it_came_with():
    from structlog.contextvars import get_contextvars

    from guardian_core import logs

    with logs.log_context(request_id="web-1", user_id=3):
        logs.task_context_bind(_Task(_Request("t-1", guardian_request_id="web-1")), (7,), {})
        assert get_contextvars() == {
            "task_id": "t-1",
            "task": "runs.advance_run",
            "request_id": "web-1",
            "run_id": 7,
        }
        headers: dict = {}
        logs.task_publish_headers(headers)  # what this task enqueues carries the same id
        assert headers == {"guardian_request_id": "web-1"}
        logs.task_context_clear()
        # A task run in its caller's process gives the caller its context back.
        assert get_contextvars() == {"request_id": "web-1", "user_id": 3}
    # Beat's task: no request sent it, so it stands for its own, and names its escalation.
    logs.task_context_bind(_Task(_Request("beat-9")), (), {"run_id": 4, "escalation_id": 5})
    assert get_contextvars()["request_id"] == "beat-9"
    assert (get_contextvars()["run_id"], get_contextvars()["escalation_id"]) == (4, 5)
    logs.task_context_clear()
    assert get_contextvars() == {}
