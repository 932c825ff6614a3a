"""`make load` (`python -m load`): N outside agent loops stepping against the production shape.

Starts the soak's stack (soak/stack.py: a throwaway PostgreSQL cluster and Redis on ports of
their own, gunicorn, two Celery workers and beat), migrates a fresh database, makes one
integrator and one API token per loop, then runs for --seconds:
- --loops outside loops, each an asyncio client (httpx.AsyncClient) with its own token: start
  an external run, propose a step (a read-only lookup, or with probability --held a refund,
  an irreversible call the policy holds for a person), report its results, again; a held loop
  waits for its verdict on the wait endpoint (long polls of --wait-timeout seconds);
- a scripted reviewer answering every escalation through the reviewers' API;
- a reviewer fetching the queue page (/escalations/, signed in) every --page-every seconds.
When the time is up each loop finishes the step in hand (a held one gets its verdict) and
stops.

Figures: p50/p99 of each call (start, propose, results, wait, and the reviewer's), steps/s,
the queue page's p95, errors (count and the first few in words), CPU per step (the server's
processes' CPU time from /proc/<pid>/stat, before and after, by process, over the steps) and
PostgreSQL's connections at their peak against max_connections. Any error is a failure: the
exit code is 1, and 2 when the stack could not start. --json writes the figures too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from soak.stack import Stack, app_environment, missing_servers, port_free, wait_for_web

# The size CI runs (tests/test_load.py runs a tiny one); the target is 200 loops.
CI_LOOPS, CI_SECONDS = 20, 20.0
TARGET_PAGE_P95_MS = 150.0


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m load", description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=CI_LOOPS, help="outside loops at once")
    parser.add_argument("--seconds", type=float, default=CI_SECONDS, help="how long they step")
    parser.add_argument(
        "--held", type=float, default=0.1, help="share of steps that are held (a refund)"
    )
    parser.add_argument(
        "--guardian",
        choices=["local", "scripted"],
        default="local",
        help="the runs' guardian: the built-in local model (as an integrator gets it), or "
        "scripted calm answers (the server's own cost alone)",
    )
    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=10.0,
        help="a held loop's long poll on the wait endpoint, s (0: ask and pause 1 s instead)",
    )
    parser.add_argument("--page-every", type=float, default=0.5, help="queue page period, s")
    parser.add_argument("--web-workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--web-threads", type=int, default=8, help="threads per worker")
    parser.add_argument("--pg-max-connections", type=int, default=200)
    parser.add_argument("--pg-port", type=int, default=54410)
    parser.add_argument("--redis-port", type=int, default=63810)
    parser.add_argument("--web-port", type=int, default=8791)
    parser.add_argument(
        "--wait-port",
        type=int,
        default=8792,
        help="the wait server's port (manage.py wait_server), where held loops wait; 0: "
        "they wait on gunicorn, a thread each",
    )
    parser.add_argument("--workdir", type=Path, help="default: a fresh directory under /tmp")
    parser.add_argument("--keep", action="store_true", help="keep the workdir (logs, data)")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument(
        "--bad-token",
        action="store_true",
        help="a fault for tests/test_load.py: the first loop sends a token that does not exist",
    )
    args = parser.parse_args(argv)
    if args.loops < 1 or args.seconds <= 0 or not 0 <= args.held <= 1:
        parser.error("--loops ≥ 1, --seconds > 0 and 0 ≤ --held ≤ 1")
    return args


def say(text: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S')}] {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    missing = missing_servers()
    if missing:
        print(f"load: cannot start the stack, missing: {'; '.join(missing)}", file=sys.stderr)
        return 2
    ports = (args.pg_port, args.redis_port, args.web_port, args.wait_port)
    busy = [p for p in ports if p and not port_free(p)]
    if busy:
        print(
            f"load: ports in use: {busy} (--pg-port, --redis-port, --web-port, --wait-port)",
            file=sys.stderr,
        )
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="guardian-load-"))
    stack = Stack(
        workdir,
        args.pg_port,
        args.redis_port,
        args.web_port,
        db_name="load",
        pg_max_connections=args.pg_max_connections,
        web_workers=args.web_workers,
        web_threads=args.web_threads,
    )
    say(f"workdir {workdir}; PostgreSQL :{args.pg_port}, Redis :{args.redis_port}")
    try:
        return _load(args, stack)
    finally:
        stack.teardown(keep=args.keep)
        if args.keep:
            say(f"kept {workdir} (logs under logs/)")


def _load(args: argparse.Namespace, stack: Stack) -> int:
    try:
        stack.servers_start()
    except Exception as exc:  # noqa: BLE001
        print(f"load: the servers did not start: {exc}", file=sys.stderr)
        return 2
    stack.env = app_environment(stack)
    if args.wait_port:
        # As docker-compose.yml serves it: verdict waits on the wait server, not gunicorn.
        stack.env["GUARDIAN_WAIT_URL"] = f"http://127.0.0.1:{args.wait_port}"
    os.environ.update(stack.env)

    import django

    django.setup()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    from django.core.management import call_command

    from demo.setup import demo_policy_version
    from soak.stack import worker_queues

    say("migrating a fresh database")
    call_command("migrate", verbosity=0, interactive=False)
    demo_policy_version()
    loop_tokens, reviewer_tokens, cookie = _people(args.loops)
    if args.bad_token:
        loop_tokens[0] = "gdn_" + "0" * 40
    queues = worker_queues()
    stack.define_processes(queues)
    if args.wait_port:
        stack.add(
            "wait",
            [sys.executable, "manage.py", "wait_server", "--port", str(args.wait_port)],
        )
    for name in stack.procs:
        stack.start(name)
    wait_for_web(stack)
    if args.wait_port:
        _wait_for_wait_server(args.wait_port)
    say(
        f"gunicorn on {stack.web_url} ({args.web_workers} workers × {args.web_threads} "
        f"threads), two workers on queues {queues}, beat"
        + (f", the wait server on :{args.wait_port}" if args.wait_port else "")
    )
    say(
        f"load: {args.loops} outside loops for {args.seconds:.0f} s, {args.held:.0%} of steps "
        f"held, guardian {args.guardian}"
    )
    figures = asyncio.run(_traffic(args, stack, loop_tokens, reviewer_tokens, cookie))
    down = [name for name, proc in stack.procs.items() if proc.popen.poll() is not None]
    if down:
        figures["errors"]["count"] += 1
        figures["errors"]["first"].append(f"processes exited during the load: {down}")
    _print(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if figures["errors"]["count"] == 0 else 1


def _wait_for_wait_server(port: int, timeout: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"the wait server did not answer on :{port} in {timeout:.0f} s")


def _people(loops: int) -> tuple[list[str], list[str], str]:
    """An integrator and an API token per loop, two reviewers' tokens (a quorum needs two),
    and the session cookie of the first reviewer, signed in for the queue page."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import (
        BACKEND_SESSION_KEY,
        HASH_SESSION_KEY,
        SESSION_KEY,
        get_user_model,
    )
    from django.contrib.auth.models import Group

    from guardian_core.services import api_token_create

    def person(username: str, group: str):
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.set_unusable_password()
        user.save()
        user.groups.set([Group.objects.get(name=group)])
        return user

    loop_tokens = [
        api_token_create(user=person(f"load-loop-{i}", "integrator"), name="load")[1]
        for i in range(loops)
    ]
    reviewers = [person(f"load-reviewer-{i}", "reviewer") for i in (1, 2)]
    reviewer_tokens = [api_token_create(user=r, name="load")[1] for r in reviewers]
    # Signed in as the login view would sign the reviewer in (no password to guess here).
    session = import_module(settings.SESSION_ENGINE).SessionStore()
    session[SESSION_KEY] = str(reviewers[0].pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = reviewers[0].get_session_auth_hash()
    session.save()
    return loop_tokens, reviewer_tokens, f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


async def _traffic(
    args: argparse.Namespace,
    stack: Stack,
    loop_tokens: list[str],
    reviewer_tokens: list[str],
    cookie: str,
) -> dict:
    from load import cpu
    from load.loops import OutsideLoop, Reviewer, Tally, sample_pg_connections, watch_queue_page

    tally = Tally()
    stop = asyncio.Event()
    reviewer = Reviewer(url=stack.web_url, tokens=reviewer_tokens, tally=tally)
    helpers = [
        asyncio.create_task(reviewer.serve(stop)),
        asyncio.create_task(
            watch_queue_page(
                url=stack.web_url, cookie=cookie, tally=tally, stop=stop, every=args.page_every
            )
        ),
        asyncio.create_task(
            sample_pg_connections(database_url=stack.database_url, tally=tally, stop=stop)
        ),
    ]
    roots = cpu.stack_roots(stack)
    server_before, machine_before = cpu.tree_seconds(roots), cpu.machine_seconds()
    client_before = _own_cpu()
    started = time.monotonic()
    deadline = started + args.seconds
    loops = [
        OutsideLoop(
            index=i,
            url=stack.web_url,
            token=token,
            tally=tally,
            held_fraction=args.held,
            deadline=deadline,
            wait_timeout=args.wait_timeout,
            guardian=args.guardian,
            seed=args.seed * 10_000 + i,
        )
        for i, token in enumerate(loop_tokens)
    ]
    await asyncio.gather(*(loop.drive() for loop in loops))
    elapsed = time.monotonic() - started
    server_after, machine_after = cpu.tree_seconds(roots), cpu.machine_seconds()
    client_seconds = _own_cpu() - client_before
    stop.set()
    await asyncio.gather(*helpers)

    by_process = {
        name: round(server_after[name] - server_before.get(name, 0.0), 2) for name in server_after
    }
    server_seconds = sum(by_process.values())
    busy_machine = machine_after[0] - machine_before[0]
    all_machine = machine_after[1] - machine_before[1]
    steps = max(tally.steps, 1)
    page = tally.latencies.get("queue page", [])
    return {
        "loops": args.loops,
        "seconds": args.seconds,
        "held_fraction": args.held,
        "guardian": args.guardian,
        "elapsed_s": round(elapsed, 1),
        "steps": tally.steps,
        "held_steps": tally.held,
        "runs": tally.runs,
        "verdicts": tally.verdicts,
        "escalation_kinds": tally.escalation_kinds,
        "steps_per_s": round(tally.steps / elapsed, 1),
        "calls": {name: _percentiles(values) for name, values in sorted(tally.latencies.items())},
        "busy_retries": tally.busy,
        "queue_page": {
            **_percentiles(page),
            "p95_ms": _quantile(page, 0.95),
            "target_p95_ms": TARGET_PAGE_P95_MS,
        },
        "errors": {"count": tally.error_count, "first": tally.errors},
        "cpu": {
            "server_s": round(server_seconds, 2),
            "by_process_s": by_process,
            "per_step_ms": round(server_seconds / steps * 1000, 2),
            "client_s": round(client_seconds, 2),
            "client_per_step_ms": round(client_seconds / steps * 1000, 2),
            "cores": os.cpu_count(),
            # Of the machine's CPU time over the load, the share in use by anyone (others'
            # work on a shared machine included).
            "machine_busy": round(busy_machine / all_machine, 2) if all_machine else None,
        },
        "server": {
            "gunicorn": {"workers": args.web_workers, "threads": args.web_threads},
            "pg_max_connections": args.pg_max_connections,
            "pg_connections_peak": max(tally.pg_connections, default=0),
        },
    }


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _quantile(values: list[float], q: float) -> float | None:
    """The nearest-rank quantile (None with no values)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))], 1)


def _percentiles(values: list[float]) -> dict:
    return {
        "count": len(values),
        "p50_ms": _quantile(values, 0.5),
        "p99_ms": _quantile(values, 0.99),
    }


def _print(figures: dict) -> None:
    say("figures")
    print(
        f"  loops           {figures['loops']} for {figures['seconds']:.0f} s "
        f"({figures['elapsed_s']} s until the last step ended), {figures['held_fraction']:.0%} "
        f"held, guardian {figures['guardian']}"
    )
    print(
        f"  steps           {figures['steps']} decided ({figures['steps_per_s']} steps/s), "
        f"{figures['held_steps']} held and answered, {figures['runs']} runs, "
        f"{figures['verdicts']} verdicts {figures['escalation_kinds']}, "
        f"{figures['busy_retries']} busy answers sent again"
    )
    for name, call in figures["calls"].items():
        print(f"  {name:<22} n={call['count']:<6} p50 {call['p50_ms']} ms, p99 {call['p99_ms']} ms")
    page = figures["queue_page"]
    print(
        f"  queue page p95  {page['p95_ms']} ms (target ≤ {page['target_p95_ms']:.0f} ms), "
        f"{page['count']} fetches"
    )
    cpu = figures["cpu"]
    print(
        f"  cpu per step    {cpu['per_step_ms']} ms of server CPU ({cpu['server_s']} s: "
        f"{cpu['by_process_s']}); the load tool {cpu['client_per_step_ms']} ms; machine "
        f"{cpu['machine_busy']:.0%} busy on {cpu['cores']} cores"
    )
    server = figures["server"]
    print(
        f"  server          gunicorn {server['gunicorn']}; PostgreSQL connections peak "
        f"{server['pg_connections_peak']} of max_connections {server['pg_max_connections']}"
    )
    errors = figures["errors"]
    print(f"  errors          {errors['count']}")
    for line in errors["first"]:
        print(f"    {line}")
    say("PASSED" if errors["count"] == 0 else "FAILED")


if __name__ == "__main__":
    sys.exit(main())
