"""The wait server (`manage.py wait_server`): GET /api/escalations/<id>/wait served on one
asyncio event loop, so a caller waiting up to 30 s for a person's verdict holds no thread.

Why not Django's own ASGI handler: it gives every request a thread-sensitive context and runs
the request_started receivers (close_old_connections) in a thread of that context, kept until
the response is sent, and the project's middleware is sync, so each held wait would hold a
thread anyway. This is a small ASGI app of its own that answers the one path, exactly as the
API's view does (runs/external_api.EscalationWaitApi: the same checks, messages and JSON), and
/healthz.

A waiting caller costs an asyncio.Event. Reads and the final answer run on a few database
threads (GUARDIAN_WAIT_DB_THREADS), each with one connection kept open; nothing waits on
them. A caller is woken by the announcement guardian_core/wakeups.py publishes once a verdict
commits; every GUARDIAN_WAIT_FALLBACK_SECONDS one statement finds the escalations it holds
callers for that settled meanwhile, so a lost announcement only delays an answer."""

import asyncio
import contextlib
import io
import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis.asyncio
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.db import DatabaseError, connections
from django.http import Http404
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext as _
from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from structlog.contextvars import bind_contextvars

from escalations.models import Escalation, EscalationStatus
from guardian_core.api import error_body
from guardian_core.authentication import BearerTokenAuthentication
from guardian_core.logs import REQUEST_ID_HEADER, request_id_from
from guardian_core.wakeups import CHANNEL
from runs.external import MAX_WAIT_SECONDS, external_verdict_answer
from runs.external_api import wait_timeout, waited_escalation

logger = logging.getLogger(__name__)

# The API's own path (runs/api_urls.py), so a client swaps only the host.
WAIT_PATH = re.compile(
    re.escape(reverse("api:escalation-wait", args=[0])).replace("/0/", r"/(?P<pk>[0-9]+)/")
)
# How long a database thread keeps its connection between calls (Django's CONN_MAX_AGE, for
# this process alone): a few threads serve every caller, so each keeps one.
CONNECTION_MAX_AGE_SECONDS = 300
# The most escalations one poll statement names (SQLite's bound on parameters is far above).
POLL_CHUNK = 1000
# A lost Redis connection is tried again after this long, doubling up to the last.
RECONNECT_SECONDS = (0.5, 10.0)
PUBSUB_HEALTH_CHECK_SECONDS = 30


class Database:
    """Django code on a few threads of its own, awaited without holding the loop."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="wait-db")
        for alias in connections:
            connections.settings[alias]["CONN_MAX_AGE"] = CONNECTION_MAX_AGE_SECONDS

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        # asgiref carries the caller's context (its language, its log ids) to the thread.
        call = sync_to_async(_django_call, thread_sensitive=False, executor=self._pool)
        return await call(function, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _django_call(function: Callable[..., Any], *args: Any) -> Any:
    # What Django does at each request's start and end: a connection that failed or outlived
    # its age is closed (a fresh one opens on the next statement).
    for connection in connections.all(initialized_only=True):
        connection.close_if_unusable_or_obsolete()
    try:
        return function(*args)
    finally:
        for connection in connections.all(initialized_only=True):
            connection.close_if_unusable_or_obsolete()


class Waiters:
    """The escalations this process holds callers for, each caller an asyncio.Event set when
    its escalation may have settled: by an announcement, or by the poll."""

    def __init__(self, database: Database, *, redis_url: str, poll_seconds: float) -> None:
        self._database = database
        self._redis_url = redis_url
        self._poll_seconds = poll_seconds
        self._events: dict[int, set[asyncio.Event]] = {}
        # Callers past their checks, waiting (/healthz says how many).
        self.held = 0
        # An answer being read, by escalation and language: callers of one escalation woken
        # together share one read of it (the answer of a settled escalation is the same for
        # each: only its run's owner may wait on it).
        self._answers: dict[tuple[int, str], asyncio.Future] = {}
        self._poll_now = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.listening = False

    async def answer(self, escalation: Escalation) -> dict:
        key = (escalation.pk, translation.get_language())
        reading = self._answers.get(key)
        if reading is None:
            reading = asyncio.ensure_future(self._database.run(external_verdict_answer, escalation))
            self._answers[key] = reading
            reading.add_done_callback(lambda _done: self._answers.pop(key, None))
        # Shielded: a caller who hangs up does not cancel the read the others wait for.
        return await asyncio.shield(reading)

    def start(self) -> None:
        if self._tasks:
            return
        self._tasks.append(asyncio.create_task(self._poll_loop(), name="wait-poll"))
        if self._redis_url:
            self._tasks.append(asyncio.create_task(self._listen(), name="wait-listen"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    @contextlib.contextmanager
    def watching(self, escalation_id: int):
        """An Event set when `escalation_id` may have settled, for the block's duration."""
        event = asyncio.Event()
        self._events.setdefault(escalation_id, set()).add(event)
        try:
            yield event
        finally:
            events = self._events.get(escalation_id, set())
            events.discard(event)
            if not events:
                self._events.pop(escalation_id, None)

    def wake(self, escalation_id: int) -> None:
        for event in self._events.get(escalation_id, ()):
            event.set()

    async def _listen(self) -> None:
        delay = RECONNECT_SECONDS[0]
        while True:
            client = redis.asyncio.Redis.from_url(
                self._redis_url, health_check_interval=PUBSUB_HEALTH_CHECK_SECONDS
            )
            try:
                async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    self.listening, delay = True, RECONNECT_SECONDS[0]
                    # Whatever settled while nobody listened is found now, not at the next poll.
                    self._poll_now.set()
                    async for message in pubsub.listen():
                        with contextlib.suppress(TypeError, ValueError):
                            self.wake(int(message["data"]))
            except (redis.RedisError, OSError) as exc:
                logger.warning(
                    "the wait server lost its Redis announcements (%s); it polls every %g s "
                    "and tries again in %g s",
                    exc,
                    self._poll_seconds,
                    delay,
                )
            finally:
                self.listening = False
                await client.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RECONNECT_SECONDS[1])

    async def _poll_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poll_now.wait(), self._poll_seconds)
            self._poll_now.clear()
            waited = list(self._events)
            try:
                for start in range(0, len(waited), POLL_CHUNK):
                    chunk = waited[start : start + POLL_CHUNK]
                    for escalation_id in await self._database.run(_settled, chunk):
                        self.wake(escalation_id)
            except DatabaseError as exc:
                logger.warning("the wait server's poll could not read escalations: %s", exc)


def _settled(escalation_ids: list[int]) -> list[int]:
    return list(
        Escalation.objects.filter(pk__in=escalation_ids)
        .exclude(status=EscalationStatus.OPEN)
        .values_list("pk", flat=True)
    )


def _status(escalation_id: int) -> str | None:
    return Escalation.objects.filter(pk=escalation_id).values_list("status", flat=True).first()


def _caller_escalation(request: ASGIRequest, pk: int, raw_timeout: str) -> tuple[Escalation, float]:
    """As EscalationWaitApi checks, in its order: the bearer token (a session cookie is no
    credential here), runs.drive_run, the caller's own escalation, then the timeout."""
    found = BearerTokenAuthentication().authenticate(request)
    if found is None:
        raise exceptions.NotAuthenticated()
    user = found[0]
    if not user.has_perm("runs.drive_run"):
        raise exceptions.PermissionDenied()
    return waited_escalation(user=user, pk=pk), wait_timeout(raw_timeout)


class WaitServer:
    """The ASGI application: the wait path, /healthz, and a JSON 404 for anything else."""

    def __init__(
        self,
        *,
        redis_url: str | None = None,
        poll_seconds: float | None = None,
        db_threads: int | None = None,
    ) -> None:
        self.database = Database(db_threads or settings.GUARDIAN_WAIT_DB_THREADS)
        self._redis_url = settings.GUARDIAN_WAIT_REDIS_URL if redis_url is None else redis_url
        self._poll_seconds = poll_seconds or settings.GUARDIAN_WAIT_FALLBACK_SECONDS
        self.waiters: Waiters | None = None

    def _started(self) -> Waiters:
        # Made on the serving loop (its Events belong to it), at the lifespan's start or, for
        # a server run without one, at the first request.
        if self.waiters is None:
            self.waiters = Waiters(
                self.database, redis_url=self._redis_url, poll_seconds=self._poll_seconds
            )
        self.waiters.start()
        return self.waiters

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._started()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.waiters is not None:
                    await self.waiters.stop()
                self.database.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope, receive, send) -> None:
        waiters = self._started()
        if scope["path"] == "/healthz":
            announcements = "listening" if waiters.listening else "off"
            if self._redis_url and not waiters.listening:
                announcements = "reconnecting"
            body = {"status": "ok", "waiting": waiters.held, "announcements": announcements}
            await _send_json(send, 200, body, {})
            return
        answering = asyncio.create_task(self._answer(scope, waiters))
        gone = asyncio.create_task(_disconnected(receive))
        done, _pending = await asyncio.wait({answering, gone}, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if answering not in done:  # the caller hung up: nothing to wait for any more
            answering.cancel()
            return
        status, body, headers = answering.result()
        await _send_json(send, status, body, headers, with_body=scope["method"] != "HEAD")

    async def _answer(self, scope, waiters: Waiters) -> tuple[int, dict, dict]:
        request = ASGIRequest(scope, io.BytesIO())
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        bind_contextvars(request_id=request_id)  # this task's context only
        headers = {REQUEST_ID_HEADER: request_id, "Vary": "Accept-Language, Cookie"}
        with translation.override(translation.get_language_from_request(request)):
            status, body = await self._outcome(request, waiters)
            headers["Content-Language"] = translation.get_language()
        logging.getLogger("guardian.request").info(
            "%s %s %s",
            request.method,
            request.path,
            status,
            extra={"method": request.method, "path": request.path, "status": status},
        )
        return status, body, headers

    async def _outcome(self, request: ASGIRequest, waiters: Waiters) -> tuple[int, dict]:
        try:
            request.get_host()  # ALLOWED_HOSTS, as Django checks them
        except DisallowedHost:
            return 400, error_body(_("Bad request."))
        match = WAIT_PATH.fullmatch(request.path)
        if match is None:
            return 404, error_body(exceptions.NotFound().detail)
        if request.method not in ("GET", "HEAD"):
            return 405, error_body(exceptions.MethodNotAllowed(request.method).detail)
        pk = int(match["pk"])
        # Watched before the first read: a verdict committed between that read and the wait
        # still wakes this caller.
        with waiters.watching(pk) as woken:
            try:
                escalation, timeout = await self.database.run(
                    _caller_escalation, request, pk, request.GET.get("timeout", "0")
                )
            except exceptions.APIException as exc:
                return (403 if exc.status_code == 401 else exc.status_code), error_body(exc.detail)
            except Http404:
                return 404, error_body(exceptions.NotFound().detail)
            bind_contextvars(escalation_id=pk, run_id=escalation.run_id)
            loop = asyncio.get_running_loop()
            longest = min(MAX_WAIT_SECONDS, settings.GUARDIAN_EXTERNAL_MAX_WAIT_SECONDS)
            deadline = loop.time() + min(timeout, longest)
            status = escalation.status
            waiters.held += 1
            try:
                while status == EscalationStatus.OPEN and loop.time() < deadline:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), deadline - loop.time())
                    woken.clear()
                    status = await self.database.run(_status, pk)
            finally:
                waiters.held -= 1
        return 200, await waiters.answer(escalation)


async def _disconnected(receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _send_json(send, status: int, body: dict, headers: dict, *, with_body=True) -> None:
    content = JSONRenderer().render(body)  # the API's own bytes (UNICODE_JSON, compact)
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
    ]
    raw_headers += [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    if status == 405:
        raw_headers.append((b"allow", b"GET, HEAD"))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": content if with_body else b""})
