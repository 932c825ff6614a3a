"""`make bench`: what Guardian adds to each step of an agent loop that runs elsewhere (issue 13:
at most 5 ms median for the call before a step, and 5 ms for the call after it).

One external run of BENCH_EXTERNAL_STEPS steps (default 500), each a read-only lookup, with
the scripted guardian (no model time): the call before the step (record, validate, the risk
question, the whole-step gate) and the call after it (the results, the post-execution
questions, the decision), timed over the run's first and last tenth (steps 1-50 and 450-499
of 500), medians:
- server side, in this process through Django's test Client with the integrator's token
  (middleware, authentication, the view, the service, the SQL: everything but the socket),
  with the SQL statements of one call;
- end to end, through the Python client (guardian_client, keep-alive) to a gunicorn worker on
  127.0.0.1: what the caller's loop waits for.
The ratio of the last steps to the first says whether a step costs more as the run grows.
Then the first calls of BENCH_EXTERNAL_FIRST (3) fresh gunicorn processes (started as in
production, with guardian_core/gunicorn_conf.py), on a run of the local guardian (the one
with a model to load): the first call before a step and the first after it, against the
median of the next ones, once the process answers /healthz.
Uses the configured database (migrated first). Run alone: .venv/bin/python -m bench.external_step
"""

import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, reset_queries  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from bench.report import Report  # noqa: E402

STEPS = int(os.environ.get("BENCH_EXTERNAL_STEPS", "500"))
FIRST_PROCESSES = int(os.environ.get("BENCH_EXTERNAL_FIRST", "3"))
FIRST_TARGET_MS = 50.0
TARGET_MS = 5.0
GOAL = "bench: external steps"  # every run this section makes has this goal
LOOKUP = {
    "name": "lookup_order",
    "description": "Read an order by its id.",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
    "risk_class": "read_only",
}
REPO = Path(__file__).resolve().parent.parent


def _windows(steps: int) -> dict[str, range]:
    """The first and the last tenth of the run (at least ten steps each): a median of 50
    calls, not 10, on a noisy machine."""
    width = max(10, steps // 10)
    return {
        f"steps 1-{width}": range(1, width + 1),
        f"steps {steps - width}-{steps - 1}": range(steps - width, steps),
    }


def _run_body() -> dict:
    return {
        "goal": GOAL,
        "acceptance_criteria": ["Every order read"],
        "actor": "external",
        "guardian": "scripted",
        "tools": [LOOKUP],
        "budgets": {"max_turns": STEPS + 5, "max_tokens": 10 * STEPS + 100},
        "config": {
            "scenario": {
                "name": "bench-external",
                "goal": GOAL,
                "actor": {"turns": []},
                "guardian": {"model_version": "scripted-bench"},
            }
        },
    }


def _step_body(index: int) -> dict:
    call = {"tool": "lookup_order", "arguments": {"order_id": f"ord_{index:05d}"}, "call_id": "c"}
    return {"step": index, "message": "", "calls": [call], "tokens": 1}


def _integrator_token() -> str:
    """A fresh API token of a bench integrator nobody can sign in as."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from guardian_core.services import api_token_create

    user, created = get_user_model().objects.get_or_create(username="bench-integrator")
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    user.groups.add(Group.objects.get(name="integrator"))
    _, secret = api_token_create(user=user, name=f"bench {secrets.token_hex(4)}")
    return secret


def _poster(secret: str):
    """post(url, body) -> the answer's JSON, through Django's test Client with the token."""
    from django.test import Client

    # The test Client's host: with DEBUG off no host is allowed unless ALLOWED_HOSTS says.
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    client = Client(headers={"Authorization": f"Bearer {secret}"})

    def post(url: str, body: dict) -> dict:
        response = client.post(url, json.dumps(body), content_type="application/json")
        if response.status_code not in (200, 201):
            raise SystemExit(f"{url}: HTTP {response.status_code} {response.content[:300]!r}")
        return response.json()

    return post


def _server_side(secret: str) -> tuple[dict, dict, dict]:
    """({step: ms before}, {step: ms after}, {step: (SQL statements before, after)})."""
    from django.urls import reverse

    post = _poster(secret)
    run = post(reverse("api:run-start"), _run_body())
    before, after, statements = {}, {}, {}
    for index in range(STEPS):
        reset_queries()  # the query log is bounded: a full one counts nothing
        with CaptureQueriesContext(connection) as asked:
            start = time.perf_counter()
            gate = post(reverse("api:run-steps", args=[run["id"]]), _step_body(index))
            before[index] = (time.perf_counter() - start) * 1000
        with CaptureQueriesContext(connection) as reported:
            start = time.perf_counter()
            decided = post(
                gate["results_url"],
                {"results": [{"position": 0, "result": f"ord_{index:05d}: paid 49.90"}]},
            )
            after[index] = (time.perf_counter() - start) * 1000
        statements[index] = (len(asked), len(reported))
        if not decided["decision"]["may_continue"]:
            raise SystemExit(f"step {index} ended {decided['decision']['outcome']!r}")
    return before, after, statements


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _gunicorn(port: int) -> subprocess.Popen:
    """One gunicorn worker (threaded, as in production) on 127.0.0.1, the production settings
    but for the scripted guardian (allowed here, as in the demo)."""
    env = {
        **os.environ,
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "GUARDIAN_ALLOW_SCRIPTED_ADAPTERS": "true",
        "GUARDIAN_ENV_FILE": "",
    }
    log = Path(settings.VAR_DIR) / "bench" / "external-step-gunicorn.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "guardian_core.wsgi:application"]
        # As production starts it: the worker loads the guardian's model before it serves.
        + ["--config", "python:guardian_core.gunicorn_conf"]
        + ["--bind", f"127.0.0.1:{port}", "--workers", "1", "--access-logfile", "-"]
        # As docker-compose.yml serves it: threads, and so keep-alive connections.
        + ["--worker-class", "gthread", "--threads", "4"],
        cwd=REPO,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


def _until_up(url: str, server: subprocess.Popen, timeout: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"gunicorn exited with {server.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"gunicorn did not answer on {url} within {timeout:.0f} s")


def _over_http(secret: str) -> tuple[dict[int, float], dict[int, float]]:
    """({step: ms before}, {step: ms after}) through the Python client to gunicorn."""
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    try:
        from guardian_client import Call, Guardian, Result, Tool
    except ImportError as exc:
        raise SystemExit(f"the Python client is not installed (clients/python): {exc}") from exc

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = _gunicorn(port)
    try:
        _until_up(url, server)
        body = _run_body()
        with Guardian(url, secret) as guardian:
            run = guardian.run(
                goal=body["goal"],
                acceptance_criteria=body["acceptance_criteria"],
                tools=[Tool(**LOOKUP)],
                guardian="scripted",
                budgets=body["budgets"],
                config=body["config"],
            )
            before, after = {}, {}
            for index in range(STEPS):
                order = f"ord_{index:05d}"
                start = time.perf_counter()
                gate = run.before(calls=[Call("lookup_order", {"order_id": order}, "c")], tokens=1)
                before[index] = (time.perf_counter() - start) * 1000
                start = time.perf_counter()
                decision = run.after([Result(0, f"{order}: paid 49.90")])
                after[index] = (time.perf_counter() - start) * 1000
                if gate.status != "run" or not decision.may_continue:
                    raise SystemExit(f"step {index}: {gate.status}, then {decision.outcome}")
        return before, after
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def _first_calls(secret: str) -> list[tuple[float, float, float]]:
    """[(ms of the first call before a step, the first after it, the median of the next
    calls)] of FIRST_PROCESSES fresh gunicorn processes, each on a new run of the local
    guardian started in this process."""
    import httpx
    from django.urls import reverse

    post = _poster(secret)
    body = {**_run_body(), "guardian": "local", "config": {}}
    found = []
    for _ in range(FIRST_PROCESSES):
        run = post(reverse("api:run-start"), body)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        server = _gunicorn(port)
        try:
            _until_up(url, server, timeout=60.0)
            times = []
            with httpx.Client(headers={"Authorization": f"Bearer {secret}"}) as http:
                for index in range(6):
                    start = time.perf_counter()
                    gate = http.post(f"{url}/api/runs/{run['id']}/steps/", json=_step_body(index))
                    times.append((time.perf_counter() - start) * 1000)
                    start = time.perf_counter()
                    results = [{"position": 0, "result": f"ord_{index:05d}: paid 49.90"}]
                    decided = http.post(
                        f"{url}{gate.json()['results_url']}", json={"results": results}
                    )
                    times.append((time.perf_counter() - start) * 1000)
                    if gate.status_code != 201 or decided.status_code != 200:
                        raise SystemExit(
                            f"first calls: HTTP {gate.status_code}, {decided.status_code}"
                        )
            found.append((times[0], times[1], statistics.median(times[2:])))
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
    return found


def measure(report: Report) -> dict[str, float]:
    """Report and return the median ms of each call per window ({label: ms})."""
    from demo.setup import demo_policy_version
    from runs.models import Run, RunStatus

    call_command("migrate", verbosity=0)
    if STEPS < 20:
        raise SystemExit("BENCH_EXTERNAL_STEPS must be at least 20 (two windows of ten steps)")
    demo_policy_version()
    settings.GUARDIAN_ALLOW_SCRIPTED_ADAPTERS = True
    secret = _integrator_token()
    windows = _windows(STEPS)
    medians: dict[str, float] = {}
    try:
        before, after, statements = _server_side(secret)
        for label, window in windows.items():
            for side, (call, times) in enumerate((("before", before), ("after", after))):
                name = f"server side, call {call} the step, {label}"
                medians[name] = statistics.median(times[i] for i in window)
                counts = "/".join(map(str, sorted({statements[i][side] for i in window})))
                report.add(
                    name,
                    medians[name],
                    "ms",
                    extra=f"target ≤ {TARGET_MS:.0f} ms; {counts} SQL statements "
                    f"({connection.vendor})",
                )
        http_before, http_after = _over_http(secret)
        for label, window in windows.items():
            for call, times in (("before", http_before), ("after", http_after)):
                name = f"end to end, call {call} the step, {label}"
                medians[name] = statistics.median(times[i] for i in window)
                report.add(
                    name, medians[name], "ms", extra="guardian_client → gunicorn on 127.0.0.1"
                )
        if FIRST_PROCESSES:
            first = _first_calls(secret)
            for name, at in (("first call before a step", 0), ("first call after it", 1)):
                label = f"fresh process, {name}"
                medians[label] = statistics.median(calls[at] for calls in first)
                report.add(
                    label,
                    medians[label],
                    "ms",
                    extra=f"target ≤ {FIRST_TARGET_MS:.0f} ms; local guardian; "
                    + ", ".join(f"{calls[at]:.0f}" for calls in first)
                    + f" ms in {len(first)} processes",
                )
            label = "fresh process, the calls after the first two"
            medians[label] = statistics.median(calls[2] for calls in first)
            report.add(label, medians[label], "ms", extra="local guardian")
    finally:
        # The bench's runs are ended, so no sweeper takes their unfinished steps to a person.
        Run.objects.filter(goal=GOAL, status=RunStatus.RUNNING).update(status=RunStatus.CANCELLED)
    first, last = windows
    for side in ("server side", "end to end"):
        for call in ("before", "after"):
            report.ratio(
                f"{side}, {call}: {last} / {first}",
                medians[f"{side}, call {call} the step, {last}"]
                / medians[f"{side}, call {call} the step, {first}"],
            )
    return medians


def main() -> None:
    report = Report("external step")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
