"""The client's exceptions: one per kind of answer a caller handles differently."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class GuardianError(Exception):
    """Anything Guardian refused or could not answer; `status` is the HTTP status (0 when no
    answer came), `body` the JSON it sent."""

    def __init__(self, message: str, *, status: int = 0, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class InvalidRequest(GuardianError):
    """400: the request itself is wrong; `problems` maps each bad field to what is wrong."""

    @property
    def problems(self) -> Mapping[str, list[str]]:
        return self.body if isinstance(self.body, Mapping) else {}


class NotAllowed(GuardianError):
    """401 or 403: no token, a revoked one, or a token whose user may not do this."""


class NotFound(GuardianError):
    """404: no such run, step or escalation (or not one this token may see)."""


class Conflict(GuardianError):
    """409: the step number or its content disagrees with what Guardian recorded (a retry
    with other content, a step out of turn, a run that has ended or waits on a person)."""


class Unavailable(GuardianError):
    """Guardian could not be reached, or answered 5xx, after every retry. Nothing was lost:
    the same call, retried later, gets the same answer."""


def _said(body: Any) -> str:
    """Guardian's messages in words: each one names its field already."""
    if isinstance(body, Mapping):
        return "; ".join(_said(messages) for messages in body.values())
    if isinstance(body, list):
        return "; ".join(_said(message) for message in body)
    return str(body)


def error_for(status: int, body: Any) -> GuardianError:
    message = f"Guardian answered {status}: {_said(body) or '(no reason given)'}"
    kind = {400: InvalidRequest, 401: NotAllowed, 403: NotAllowed, 404: NotFound, 409: Conflict}
    return kind.get(status, Unavailable if status >= 500 else GuardianError)(
        message, status=status, body=body
    )
