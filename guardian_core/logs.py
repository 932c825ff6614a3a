"""Structured logs: the ids a log line carries (request, user, run, turn, escalation, model
version), bound per request, per Celery task and where a turn is decided, and the JSON-lines
formatter GUARDIAN_LOG_FORMAT=json selects.

Every logger stays a stdlib one: the ids live in structlog's context variables, and the JSON
formatter (a structlog ProcessorFormatter) merges them into each record it writes, whichever
library logged it (Django, Celery, Guardian). The plain format ignores them: `make demo`'s lines
read as they always did. Only ids and enums are bound, never text an agent or a tool wrote.
"""

import contextlib
import inspect
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import structlog
from structlog.contextvars import bind_contextvars, clear_contextvars

REQUEST_ID_HEADER = "X-Request-ID"
# Where the request id rides on a Celery message (its headers), to the task's worker.
TASK_HEADER = "guardian_request_id"
# A caller's request id is taken as given only when it looks like one: it is written into every
# line of the request, so nothing that could forge a line or smuggle text in is accepted.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
# A task's arguments that name the ids a line carries (tasks take ids: docs/ARCHITECTURE.md).
TASK_ID_ARGUMENTS = {"run_id": "run_id", "escalation_id": "escalation_id", "job_id": "job_id"}


def json_formatter() -> logging.Formatter:
    """The JSON-lines formatter: one object a line, with the bound ids, the logger's name, the
    level, an ISO timestamp (UTC) and any `extra` fields of the record."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            _without_request_object,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(default=str),
        ],
    )


def _without_request_object(logger, method_name: str, event_dict: dict) -> dict:
    """Django's request loggers pass the request object along: its path is in the message, and
    the object is no field a line can carry (nor is a socket, runserver's other extra)."""
    event_dict.pop("request", None)
    event_dict.pop("server_time", None)
    return event_dict


@contextlib.contextmanager
def log_context(**ids: object) -> Iterator[None]:
    """Bind `ids` (those not None) to every line logged inside the block; once it ends, the
    context is as it was before (what log_bind added inside is gone too)."""
    before = structlog.contextvars.get_contextvars()
    log_bind(**ids)
    try:
        yield
    finally:
        clear_contextvars()
        bind_contextvars(**before)


def log_bind(**ids: object) -> None:
    """Bind `ids` (those not None) to every line logged from here until the request or task
    ends (its context is cleared then)."""
    bind_contextvars(**{name: value for name, value in ids.items() if value is not None})


def request_id_from(value: str | None) -> str:
    """The caller's request id when it is a plausible one, else a new one."""
    if value and _REQUEST_ID.fullmatch(value):
        return value
    return uuid.uuid4().hex


def current_request_id() -> str | None:
    return structlog.contextvars.get_contextvars().get("request_id")


# ---- the web ---------------------------------------------------------------------------------


class RequestLogContextMiddleware:
    """Bind the request id (the caller's X-Request-ID, or a new one) and the user to every line
    logged while a request is served, return it in the response's X-Request-ID, and log one
    line for the request (logger guardian.request: the plain format keeps it quiet)."""

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request):
        clear_contextvars()
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        bind_contextvars(request_id=request_id)
        try:
            response = self.get_response(request)
            # An API caller is authenticated by the view (a token), after process_view.
            _bind_user(request)
            response[REQUEST_ID_HEADER] = request_id
            method, path, status = request.method, request.path, response.status_code
            logging.getLogger("guardian.request").info(
                "%s %s %s",
                method,
                path,
                status,
                extra={"method": method, "path": path, "status": status},
            )
            return response
        finally:
            clear_contextvars()

    def process_view(self, request, view_func, view_args, view_kwargs):
        _bind_user(request)
        return None


def _bind_user(request) -> None:
    user = getattr(request, "user", None)
    if user is not None and getattr(user, "is_authenticated", False):
        bind_contextvars(user_id=user.pk)


# ---- Celery ----------------------------------------------------------------------------------


def task_publish_headers(headers: dict | None) -> None:
    """Carry the request id bound now (a web request's, or the task's that enqueues this one)
    on the message being sent (Celery's before_task_publish)."""
    request_id = current_request_id()
    if headers is not None and request_id and TASK_HEADER not in headers:
        headers[TASK_HEADER] = request_id


def task_context_bind(task, args: tuple | None, kwargs: dict | None) -> None:
    """A task's lines carry its id and name, the request id its message came with, and the ids
    its arguments name (Celery's task_prerun). What was bound before (a caller running the
    task in its own process) is put back by task_context_clear."""
    _saved.append(structlog.contextvars.get_contextvars())
    clear_contextvars()
    request = getattr(task, "request", None)
    bind_contextvars(task_id=getattr(request, "id", None), task=getattr(task, "name", None))
    # A task no request enqueued (beat's, a command's) stands for its own: its id, carried on
    # to what it enqueues (the sweeper's runs), so those lines still lead back to it.
    request_id = (
        getattr(request, TASK_HEADER, None)
        or (getattr(request, "headers", None) or {}).get(TASK_HEADER)
        or getattr(request, "id", None)
    )
    log_bind(request_id=request_id)
    log_bind(**task_argument_ids(task, args or (), kwargs or {}))


def task_argument_ids(task, args: tuple, kwargs: dict) -> dict[str, object]:
    """The ids among a task's arguments, by the names its function gives them."""
    try:
        bound = inspect.signature(task.run).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return {}
    return {
        field: bound[name]
        for name, field in TASK_ID_ARGUMENTS.items()
        if isinstance(bound.get(name), int | str)
    }


def task_context_clear() -> None:
    clear_contextvars()
    if _saved:
        bind_contextvars(**_saved.pop())


# The contexts task_context_bind set aside, innermost last (a task run inside another's).
_saved: list[dict] = []


def say_as_json(msg: str, f=sys.__stderr__) -> None:
    """What the Celery worker prints rather than logs (its shutdown notices, from a signal
    handler), written as a JSON line instead: one write, no logging lock, as Celery's own
    safe_say does it, so the worker's stream stays JSON from its first line to its last."""
    line = {
        "event": str(msg).strip(),
        "level": "warning",
        "logger": "celery.worker",
        "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
    }
    # A notice lost must never stop the shutdown it announces.
    with contextlib.suppress(AttributeError, OSError, ValueError):
        os.write(f.fileno(), (json.dumps(line) + "\n").encode())
