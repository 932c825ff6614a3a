"""`make soak` (`python -m soak`): the whole stack under load and faults, then checks.

Starts its own PostgreSQL and Redis (throwaway, under --workdir, on --pg-port / --redis-port:
never the servers of CI or of other work, since it restarts them), migrates a fresh database,
then gunicorn (guardian_core.wsgi), two Celery workers and beat. It drives --runs runs over
--seconds: internal runs of the demo scenarios (the workers take their turns) and external runs
stepped through the Python client against gunicorn, with a scripted reviewer deciding every
escalation through the API. Meanwhile it SIGKILLs workers at random (--kills, each restarted),
restarts Redis once (nothing saved) and PostgreSQL once (pg_ctl -m immediate).

Then, within --grace seconds, every run must end (the sweeper re-sends what the faults
dropped), and: no tool call ran twice, every approved call ran with the approved arguments,
verify_log --all and replay --all pass, /metrics agrees with the database (when it exists).
It prints the figures (runs, turns, faults, recoveries, p50/p99 turn time) and exits 1 if any
check failed, 2 if the stack could not start. --ci is the size CI runs (tests/test_soak.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from soak.stack import Stack, app_environment, missing_servers, port_free, wait_for_web

CI_SIZE = {"runs": 60, "seconds": 60.0, "kills": 2, "grace": 180.0}
FULL_SIZE = {"runs": 300, "seconds": 240.0, "kills": 6, "grace": 240.0}


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__.splitlines()[0])
    parser.add_argument("--ci", action="store_true", help=f"CI's size: {CI_SIZE}")
    parser.add_argument("--runs", type=int, help=f"runs in all (default {FULL_SIZE['runs']})")
    parser.add_argument("--seconds", type=float, help="how long the load and faults last")
    parser.add_argument("--kills", type=int, help="worker SIGKILLs during the load")
    parser.add_argument("--grace", type=float, help="seconds after the faults for runs to end")
    parser.add_argument("--external-share", type=float, default=0.4)
    parser.add_argument("--concurrency", type=int, default=4, help="external loops at once")
    parser.add_argument("--pg-port", type=int, default=54400)
    parser.add_argument("--redis-port", type=int, default=63800)
    parser.add_argument("--web-port", type=int, default=8790)
    parser.add_argument("--workdir", type=Path, help="default: a fresh directory under /tmp")
    parser.add_argument("--keep", action="store_true", help="keep the workdir (logs, data)")
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument("--json", type=Path, help="write the figures and checks here too")
    args = parser.parse_args(argv)
    size = CI_SIZE if args.ci else FULL_SIZE
    for name, value in size.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def say(text: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {text}", flush=True)


def users_and_tokens() -> tuple[list[str], str]:
    """Two reviewers' API tokens (a quorum needs two) and an integrator's."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from guardian_core.services import api_token_create

    def token(username: str, group: str) -> str:
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.set_unusable_password()
        user.save()
        user.groups.set([Group.objects.get(name=group)])
        return api_token_create(user=user, name=f"soak {username}")[1]

    return [token("soak-reviewer-1", "reviewer"), token("soak-reviewer-2", "reviewer")], token(
        "soak-integrator", "integrator"
    )


class Faults:
    """The fault plan and what became of each fault: when, what, and how long until a turn
    was decided again (its recovery)."""

    def __init__(self, stack: Stack, seconds: float, kills: int, rng: random.Random) -> None:
        self.stack = stack
        plan = [(rng.uniform(0.05, 0.9) * seconds, "kill") for _ in range(kills)]
        plan += [(0.35 * seconds, "redis"), (0.65 * seconds, "postgres")]
        self.plan = sorted(plan)
        self.rng = rng
        self.done: list[dict] = []
        self.stop = threading.Event()

    def run(self, started: float) -> None:
        for at, kind in self.plan:
            if self.stop.wait(max(0.0, started + at - time.monotonic())):
                return
            fault = {"kind": kind, "at_s": round(time.monotonic() - started, 1)}
            try:
                self._inject(kind, fault)
            except Exception as exc:  # noqa: BLE001 - a fault that failed is a failed soak
                fault["error"] = f"{type(exc).__name__}: {exc}"
            self.done.append(fault)
            shown = {k: v for k, v in fault.items() if k in ("kind", "at_s", "target", "pid")}
            shown["in_flight"] = len(fault.get("in_flight", []))
            say(f"fault: {shown}")
            threading.Thread(target=self._recovery, args=(fault,), daemon=True).start()

    def _inject(self, kind: str, fault: dict) -> None:
        from django.utils import timezone

        from runs.models import Run
        from soak.load import db_retry

        fault["time"] = timezone.now()
        # The internal runs a worker holds right now (a live lease): the turns a fault may cut.
        fault["in_flight"] = db_retry(
            lambda: list(
                Run.objects.filter(status="running", lease_expires_at__gt=fault["time"])
                .exclude(actor="external")
                .values_list("pk", flat=True)
            )
        )
        if kind == "kill":
            name = self.rng.choice(["worker1", "worker2"])
            fault["target"] = name
            fault["pid"] = self.stack.kill(name)
            time.sleep(self.rng.uniform(0.5, 3.0))
            self.stack.start(name)
        elif kind == "redis":
            self.stack.redis_restart()
        else:
            self.stack.postgres_restart_immediate()
        fault["back"] = timezone.now()

    def _recovery(self, fault: dict, timeout: float = 300.0) -> None:
        """Seconds from the fault's end until a turn is decided again (recovered_s), and until
        every run in flight at the fault has moved on: a turn decided after it, or the run no
        longer running (in_flight_s)."""
        if "back" not in fault:
            return
        began = fault["began"] = time.monotonic()
        while time.monotonic() - began < timeout and not self.stop.is_set():
            if self._settled(fault):
                return
            time.sleep(0.5)

    def finish(self) -> None:
        """Stop the watchers, and settle each fault's recovery once more: a watcher stopped
        between two looks would otherwise miss runs that moved on meanwhile."""
        self.stop.set()
        for fault in self.done:
            if "began" in fault:
                self._settled(fault)

    def _settled(self, fault: dict) -> bool:
        from django.db.models import Q

        from runs.models import Run, Turn
        from soak.load import db_retry

        in_flight = fault.get("in_flight", [])
        began = fault["began"]
        if "recovered_s" not in fault and db_retry(
            lambda: Turn.objects.filter(finished_at__gt=fault["back"]).exists()
        ):
            fault["recovered_s"] = round(time.monotonic() - began, 1)
        moved = db_retry(
            lambda: (
                Run.objects.filter(pk__in=in_flight)
                .filter(~Q(status="running") | Q(turns__finished_at__gt=fault["back"]))
                .distinct()
                .count()
            )
        )
        if moved == len(in_flight) and "in_flight_s" not in fault:
            fault["in_flight_s"] = round(time.monotonic() - began, 1)
        return "recovered_s" in fault and "in_flight_s" in fault


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    missing = missing_servers()
    if missing:
        print(f"soak: cannot start the stack, missing: {'; '.join(missing)}", file=sys.stderr)
        return 2
    busy = [p for p in (args.pg_port, args.redis_port, args.web_port) if not port_free(p)]
    if busy:
        print(f"soak: ports in use: {busy} (--pg-port, --redis-port, --web-port)", file=sys.stderr)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="guardian-soak-"))
    stack = Stack(workdir, args.pg_port, args.redis_port, args.web_port)
    say(f"workdir {workdir}; PostgreSQL :{args.pg_port}, Redis :{args.redis_port}")
    try:
        return _soak(args, stack)
    finally:
        stack.teardown(keep=args.keep)
        if args.keep:
            say(f"kept {workdir} (logs under logs/)")


def _soak(args: argparse.Namespace, stack: Stack) -> int:
    try:
        stack.servers_start()
    except Exception as exc:  # noqa: BLE001
        print(f"soak: the servers did not start: {exc}", file=sys.stderr)
        return 2
    stack.env = app_environment(stack)
    os.environ.update(stack.env)

    import django

    django.setup()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    from django.core.management import call_command

    from demo.setup import demo_policy_version
    from runs.models import Run
    from runs.scenarios import scenario_names
    from soak import checks
    from soak.load import SLOW_REFUND, Ledger, Reviewer, db_retry, external_run, internal_run_start
    from soak.stack import worker_queues

    say("migrating a fresh database")
    call_command("migrate", verbosity=0, interactive=False)
    demo_policy_version()
    reviewer_tokens, integrator_token = users_and_tokens()
    queues = worker_queues()
    stack.define_processes(queues)
    for name in stack.procs:
        stack.start(name)
    wait_for_web(stack)
    say(f"gunicorn on {stack.web_url}, workers on queues {queues}, beat")

    rng = random.Random(args.seed)
    ledger = Ledger()
    external = round(args.runs * args.external_share)
    internal = args.runs - external
    # Every demo scenario, and the slow refund as often as two of them.
    names = [*scenario_names(), SLOW_REFUND["name"], SLOW_REFUND["name"]]
    reviewer = Reviewer(stack.web_url, reviewer_tokens, ledger, seed=args.seed)
    reviewer_thread = threading.Thread(target=reviewer.loop, daemon=True)
    reviewer_thread.start()
    faults = Faults(stack, args.seconds, args.kills, rng)
    started = time.monotonic()
    fault_thread = threading.Thread(target=faults.run, args=(started,), daemon=True)
    fault_thread.start()
    supervising = threading.Event()

    def supervise() -> None:
        while not supervising.wait(1.0):
            stack.supervise()

    threading.Thread(target=supervise, daemon=True).start()

    say(f"load: {internal} internal + {external} external runs over {args.seconds:.0f} s")
    pool = ThreadPoolExecutor(max_workers=args.concurrency)
    # Spread over the load: the internal starts at even times, the external ones as fast as
    # `concurrency` loops take them, each submitted at its own time so faults meet them all.
    schedule = sorted(
        [(args.seconds * 0.9 * i / max(1, internal), "internal", i) for i in range(internal)]
        + [(args.seconds * 0.9 * i / max(1, external), "external", i) for i in range(external)]
    )
    futures = []
    for at, kind, index in schedule:
        time.sleep(max(0.0, started + at - time.monotonic()))
        if kind == "internal":
            internal_run_start(names[index % len(names)], ledger)
        else:
            seed = args.seed * 100_000 + index
            futures.append(pool.submit(external_run, stack.web_url, integrator_token, ledger, seed))
    fault_thread.join(timeout=max(0.0, started + args.seconds - time.monotonic()) + 120)
    load_seconds = time.monotonic() - started
    say(f"load and faults over after {load_seconds:.0f} s; grace {args.grace:.0f} s")

    graced = time.monotonic()
    pool.shutdown(wait=False)
    for future in futures:
        try:
            future.result(timeout=max(1.0, graced + args.grace - time.monotonic()))
        except TimeoutError:
            break  # an external loop still waiting: the checks find its run unfinished
    all_runs = db_retry(lambda: list(Run.objects.values_list("pk", flat=True)))
    left = max(1.0, graced + args.grace - time.monotonic())
    checks.wait_until_ended(all_runs, left, ledger)
    ended_after = time.monotonic() - graced
    reviewer.stop.set()
    faults.finish()
    supervising.set()
    reviewer_thread.join(timeout=30)

    all_runs = db_retry(lambda: list(Run.objects.values_list("pk", flat=True)))
    results = [
        checks.runs_ended(all_runs, args.runs, ledger),
        checks.orphan_runs(ledger),
        checks.no_call_twice(ledger),
        checks.approved_as_approved(ledger),
        checks.chains_intact(stack.app_env()),
        checks.replays_identical(stack.app_env()),
        checks.metrics_consistent(stack.web_url, stack.env["GUARDIAN_METRICS_TOKEN"]),
    ]
    down = [name for name, proc in stack.procs.items() if proc.popen.poll() is not None]
    results.append(
        checks.Check(
            "every process still up (gunicorn, workers, beat)",
            not down,
            f"exited: {down}" if down else f"{len(stack.procs)} up",
        )
    )
    exits = stack.unexpected_exits
    results.append(
        checks.Check(
            "no process exited by itself",
            True,
            f"{len(exits)} exited and were restarted (as compose's restart policy would): {exits}"
            if exits
            else "none",
            warning=bool(exits),
        )
    )
    faulty = [f for f in faults.done if "error" in f]
    results.append(
        checks.Check(
            "every fault injected",
            len(faults.done) == len(faults.plan) and not faulty,
            f"{len(faults.done)} of {len(faults.plan)} injected"
            + (f"; failed: {faulty}" if faulty else ""),
        )
    )
    ids = {
        "internal": db_retry(
            lambda: list(Run.objects.exclude(actor="external").values_list("pk", flat=True))
        ),
        "external": db_retry(
            lambda: list(Run.objects.filter(actor="external").values_list("pk", flat=True))
        ),
    }
    turns = checks.turn_figures(ids)
    figures = {
        "runs": {kind: len(v) for kind, v in ids.items()},
        "run_statuses": checks.run_statuses(all_runs),
        "turns": turns,
        "faults": [
            {
                **{k: v for k, v in f.items() if k not in ("time", "back", "began")},
                "in_flight": len(f["in_flight"]),
            }
            for f in faults.done
        ],
        "recoveries": sum(1 for f in faults.done if "recovered_s" in f and "in_flight_s" in f),
        "verdicts": {
            "given": ledger.verdicts,
            "edited": ledger.edited,
            "rejected": ledger.rejected,
            "answered": ledger.answered,
        },
        "client_retries": ledger.retries,
        "unexpected_exits": stack.unexpected_exits,
        "driver_errors": ledger.driver_errors[:20],
        "reviewer_problems": ledger.reviewer_problems[:20],
        "seconds": {"load": round(load_seconds, 1), "until_all_ended": round(ended_after, 1)},
        "checks": [c.__dict__ for c in results],
    }
    _print(figures, results)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    return 0 if all(c.passed for c in results) else 1


def _print(figures: dict, results: list) -> None:
    runs = figures["runs"]
    say("figures")
    print(
        f"  runs            {sum(runs.values())} ({runs['internal']} internal, "
        f"{runs['external']} external): {figures['run_statuses']}"
    )
    for kind, t in figures["turns"].items():
        print(
            f"  turns {kind:<9} {t['turns']} decided; turn time p50 {t['p50_ms']:.0f} ms, "
            f"p99 {t['p99_ms']:.0f} ms"
        )
    kinds = {}
    for fault in figures["faults"]:
        kinds[fault["kind"]] = kinds.get(fault["kind"], 0) + 1
    print(
        f"  faults          {len(figures['faults'])} injected {kinds}; "
        f"{figures['recoveries']} recoveries"
    )
    for fault in figures["faults"]:
        print(
            f"    {fault['kind']:<8} at {fault['at_s']:>5} s: a turn decided again after "
            f"{fault.get('recovered_s')} s; {fault['in_flight']} runs in flight, all moved on "
            f"after {fault.get('in_flight_s')} s"
        )
    print(f"  verdicts        {figures['verdicts']}; client retries {figures['client_retries']}")
    print(f"  seconds         {figures['seconds']}")
    for line in figures["driver_errors"][:5]:
        print(f"  driver error    {line}")
    for line in figures["reviewer_problems"][:5]:
        print(f"  reviewer        {line}")
    say("checks")
    for check in results:
        mark = "skip" if check.skipped else ("ok  " if check.passed else "FAIL")
        mark = "WARN" if check.warning else mark
        print(f"  {mark} {check.name}: {check.detail}")
    passed = all(c.passed for c in results)
    say("PASSED" if passed else "FAILED")


if __name__ == "__main__":
    sys.exit(main())
