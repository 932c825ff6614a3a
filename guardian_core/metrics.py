"""Guardian's Prometheus instruments (the events: turns, guardian calls, requests, chain checks),
the exposition of a registry, and what the scrape reads beside the database: Celery queue
depths, the workers' heartbeats and the last verify_log result (docs/OPERATIONS.md, Metrics).

The state figures read from the database (open escalations, runs by status, ...) are a
collector of the admins' room, policies/metrics.py, registered at scrape time: the floor
imports no room.

Events are counted in the process they happen in. A process with several children (gunicorn's
workers, a prefork Celery pool) exports them all through prometheus_client's multiprocess mode,
as its documentation prescribes: PROMETHEUS_MULTIPROC_DIR names an empty directory, set before
the process starts; every child writes its figures there and the scrape sums them.
"""

import ipaddress
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily

# Turns take from a few milliseconds (scripted) to a minute (a slow model): buckets over both.
_TURN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_GUARDIAN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10)

TURN_SECONDS = Histogram(
    "guardian_turn_duration_seconds",
    "A turn's time in the loop (proposal, checks, tools, guardian, decision), by run kind.",
    ["kind"],
    buckets=_TURN_BUCKETS,
)
GUARDIAN_SECONDS = Histogram(
    "guardian_model_call_duration_seconds",
    "One guardian question set's time (the post-execution answers or the risk check).",
    ["adapter", "model_version", "question"],
    buckets=_GUARDIAN_BUCKETS,
)
GUARDIAN_FAILURES = Counter(
    "guardian_model_call_failures",
    "Guardian question sets that gave no usable answer: timeout, error or malformed.",
    ["adapter", "model_version", "reason"],
)
HTTP_REQUESTS = Counter(
    "guardian_http_requests",
    "Requests answered by the web process, by method, route and status class.",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "guardian_http_request_duration_seconds",
    "Time to answer a request, by route.",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
CHAIN_VERIFY_FAILURES = Counter(
    "guardian_chain_verify_failures",
    "Runs whose decision log a check found broken (verify_log, the run's verify page).",
)

GUARDIAN_QUESTIONS = ("answers", "risk")


def guardian_failure_reason(answers: Iterable[object]) -> str | None:
    """Why a guardian question set gave no usable answer ("timeout", "error", "malformed"), or
    None when it answered. The adapters turn a late or raising question into a Malformed answer
    (guardian_core/adapters/timing.py, engine/loop.py) whose reason says which."""
    worst = None
    for answer in answers:
        reason = getattr(answer, "reason", None)
        if type(answer).__name__ != "Malformed" or not isinstance(reason, str):
            continue
        if "timed out" in reason or "Timeout" in reason:
            return "timeout"
        if reason.startswith(("guardian error", "guardian failed")):
            worst = "error"
        elif worst is None:
            worst = "malformed"
    return worst


def turn_observe(
    *,
    kind: str,
    adapter: str,
    model_version: str,
    timings: Mapping[str, float],
    answers: Mapping[str, object],
    risk_answers: Iterable[object],
) -> None:
    """Count one recorded turn from what its record already holds: no query, no clock read
    (the turn path is benchmarked)."""
    _child(TURN_SECONDS, kind).observe(sum(timings.values()))
    for question, seconds, given in (
        ("answers", timings.get("guardian"), answers.values()),
        ("risk", timings.get("risk"), risk_answers),
    ):
        if seconds is None:
            continue  # not asked this turn (a held step, a step with no call)
        _child(GUARDIAN_SECONDS, adapter, model_version, question).observe(seconds)
        reason = guardian_failure_reason(given)
        if reason is not None:
            _child(GUARDIAN_FAILURES, adapter, model_version, reason).inc()


_CHILDREN: dict[tuple, object] = {}


def _child(metric, *labels: str):
    """metric.labels(*labels), kept: labels() takes a lock and builds a key on every call."""
    key = (metric._name, labels)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = metric.labels(*labels)
    return child


# ---- exposition -------------------------------------------------------------------------------


def registry_for_scrape(extra: Iterable[object] = ()) -> CollectorRegistry:
    """The registry one scrape reads: this process's instruments (or, in multiprocess mode,
    every process's, summed from PROMETHEUS_MULTIPROC_DIR) and the `extra` collectors."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        registry.register(_Forward(REGISTRY))
    for collector in extra:
        registry.register(collector)
    return registry


class _Forward:
    """The default registry's figures, inside a registry of one scrape (so that the scrape's
    own collectors are not registered on the process's default registry for good)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self):
        return self.registry.collect()


def exposition(extra: Iterable[object] = ()) -> tuple[bytes, str]:
    """(body, content type) of a scrape in the Prometheus text format."""
    return generate_latest(registry_for_scrape(extra)), CONTENT_TYPE_LATEST


def address_allowed(address: str, allow: Iterable[str]) -> bool:
    """Whether `address` is in one of the networks or addresses of `allow`."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    for entry in allow:
        try:
            if ip in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


# ---- what the scrape reads beside the database ---------------------------------------------


def broker_queue_depths(
    broker_url: str, transport_options: Mapping, queues: Iterable[str]
) -> dict[str, int]:
    """Messages waiting per queue: LLEN on Redis (kombu keeps a queue as a list, one more per
    priority step), or the message files of the embedded filesystem broker."""
    queues = list(queues)
    if broker_url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(broker_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            depths = {}
            for queue in queues:
                keys = [queue, *(f"{queue}\x06\x16{step}" for step in range(1, 10))]
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    pipe.llen(key)
                depths[queue] = sum(pipe.execute())
            return depths
        finally:
            client.close()
    folder = transport_options.get("data_folder_in")
    if not folder:
        return {}
    counts = dict.fromkeys(queues, 0)
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    for name in names:
        # kombu's filesystem transport names a message <id>.<queue>.msg.
        if not name.endswith(".msg"):
            continue
        queue = name[: -len(".msg")].split(".", 1)[-1]
        if queue in counts:
            counts[queue] += 1
    return counts


def heartbeat_folder(var_dir: Path) -> Path:
    return var_dir / "worker-heartbeats"


def heartbeat_write(var_dir: Path, broker_url: str, hostname: str, now: float | None = None):
    """Record that the worker `hostname` is alive now: a Redis hash field when the broker is
    Redis (workers and web may be on different machines), a file under var/ otherwise."""
    now = time.time() if now is None else now
    if broker_url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(broker_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.hset(HEARTBEAT_KEY, hostname, repr(now))
        finally:
            client.close()
        return
    folder = heartbeat_folder(var_dir)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{hostname}.partial"
    partial.write_text(repr(now))
    os.replace(partial, folder / hostname)


HEARTBEAT_KEY = "guardian:worker-heartbeats"


def heartbeat_remove(var_dir: Path, broker_url: str, hostname: str) -> None:
    """Forget a worker that shut down cleanly: a scaled-down worker is not a silent one. A
    killed worker's heartbeat stays, and ages: that is the alert."""
    if broker_url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(broker_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.hdel(HEARTBEAT_KEY, hostname)
        finally:
            client.close()
        return
    (heartbeat_folder(var_dir) / hostname).unlink(missing_ok=True)


def heartbeats(var_dir: Path, broker_url: str) -> dict[str, float]:
    """{worker hostname: the time of its last heartbeat} as the workers recorded them."""
    if broker_url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(broker_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            raw = client.hgetall(HEARTBEAT_KEY)
        finally:
            client.close()
        return {k.decode(): float(v) for k, v in raw.items()}
    folder = heartbeat_folder(var_dir)
    beats = {}
    if folder.is_dir():
        for path in folder.iterdir():
            if path.name.startswith("."):
                continue
            try:
                beats[path.name] = float(path.read_text())
            except (OSError, ValueError):
                continue
    return beats


HEARTBEAT_STOP = threading.Event()


def heartbeat_start(
    write: Callable[[], None], every_seconds: float, *, on_error: Callable[[Exception], None]
) -> threading.Thread:
    """A daemon thread that calls `write` now and every `every_seconds` after, until
    HEARTBEAT_STOP is set (the worker shutting down)."""

    def beat() -> None:
        while not HEARTBEAT_STOP.is_set():
            try:
                write()
            except Exception as exc:  # a broker restart must not end the heartbeat for good
                on_error(exc)
            HEARTBEAT_STOP.wait(every_seconds)

    thread = threading.Thread(target=beat, name="guardian-heartbeat", daemon=True)
    thread.start()
    return thread


def worker_hostname() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


CHAIN_RECORD = "chain-verify.json"


def chain_verify_record(var_dir: Path, *, checked: int, broken: int, now: float | None = None):
    """Keep verify_log --all's last result for the scrape (guardian_chain_broken_runs)."""
    body = {"checked": checked, "broken": broken, "at": time.time() if now is None else now}
    partial = var_dir / f".{CHAIN_RECORD}.partial"
    partial.write_text(json.dumps(body))
    os.replace(partial, var_dir / CHAIN_RECORD)


def chain_verify_last(var_dir: Path) -> dict | None:
    try:
        return json.loads((var_dir / CHAIN_RECORD).read_text())
    except (OSError, ValueError):
        return None


def gauge(name: str, documentation: str, value: float | None = None, labels=()) -> object:
    """A gauge family for a collector, with one value when given."""
    family = GaugeMetricFamily(name, documentation, labels=list(labels) or None)
    if value is not None:
        family.add_metric([], value)
    return family
