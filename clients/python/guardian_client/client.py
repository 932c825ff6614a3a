"""Guardian as a sidecar of an agent loop that runs elsewhere: start a run, ask before each step
(`before` → a Gate), report its results after (`after` → a Decision), wait for a person when
one must decide (`wait` → a Verdict). Sync (`Guardian`) and async (`AsyncGuardian`) alike.

Every call can be retried: a step carries its number, and Guardian answers a repeated step with
the same content exactly as it did the first time (a conflicting one is a Conflict). A lost
connection or a 5xx is retried here with the same request, so a side effect is never doubled
by the client itself.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from guardian_client.errors import Conflict, GuardianError, Unavailable, error_for
from guardian_client.types import (
    Call,
    Decision,
    Escalation,
    Gate,
    Result,
    Tool,
    UserMessage,
    Verdict,
    calls_json,
    user_messages_json,
)

RETRY_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None
    timeout: float | None = None
    headers: Mapping[str, str] | None = None


def _start_request(body: Mapping) -> _Request:
    """Starting a run, under a key of its own that every retry repeats: a start whose answer
    was lost (a timeout, a 503 after the commit) finds the run it made, not a second one."""
    return _Request("POST", "/api/runs/start/", body, headers={"Idempotency-Key": uuid.uuid4().hex})


def _run_body(
    *,
    goal: str,
    tools: Sequence[Tool | str | Mapping],
    acceptance_criteria: Sequence[str],
    guardian: str,
    budgets: Mapping | None,
    config: Mapping | None,
    policy_version: int | None,
    webhook_url: str | None,
) -> dict:
    body: dict[str, Any] = {
        "goal": goal,
        "acceptance_criteria": list(acceptance_criteria),
        "tools": [t.as_json() if isinstance(t, Tool) else t for t in tools],
        "actor": "external",
        "guardian": guardian,
        "budgets": dict(budgets or {}),
        "config": dict(config or {}),
    }
    if policy_version is not None:
        body["policy_version"] = policy_version
    if webhook_url:
        body["webhook_url"] = webhook_url
    return body


def _step_body(
    step: int,
    message: str,
    calls: Sequence[Call | Mapping],
    tokens: int,
    cost: float,
    user_messages: str | Sequence[UserMessage | str | Mapping] = (),
) -> dict:
    body = {
        "step": step,
        "message": message,
        "calls": calls_json(calls),
        "tokens": tokens,
        "cost": cost,
    }
    if user_messages:  # absent, not empty: a step without them reads as it always did
        body["user_messages"] = user_messages_json(user_messages)
    return body


def _answer(response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if response.status_code >= 400:
        raise error_for(response.status_code, body)
    return body


class _RunState:
    """Where a run's loop stands: the next step to propose, and a step whose calls run now."""

    def __init__(self, data: Mapping) -> None:
        self.id = data["id"]
        self.next_step = data.get("next_step", 0)
        # A step whose results Guardian waits for (an attached run may have one).
        self.pending: int | None = data.get("pending_step")
        # Where to wait for each escalation seen: the `wait_url` Guardian named (its wait
        # server's, when it has one), by escalation id.
        self.wait_urls: dict[int, str] = {}
        if data.get("escalation"):
            self.escalation_seen(Escalation.from_json(data["escalation"]))

    def escalation_seen(self, escalation: Escalation | None) -> None:
        if escalation is not None and escalation.wait_url:
            self.wait_urls[escalation.id] = escalation.wait_url

    def wait_path(self, escalation: Escalation | int) -> str:
        """The escalation's `wait_url` (an absolute address on Guardian's wait server, or a
        path on this one), else the API's path."""
        if isinstance(escalation, Escalation):
            self.escalation_seen(escalation)
            escalation = escalation.id
        return self.wait_urls.get(escalation) or f"/api/escalations/{escalation}/wait"

    def gate_seen(self, gate: Gate) -> Gate:
        self.escalation_seen(gate.escalation)
        if gate.status == "run":
            self.pending = gate.step
        else:
            self.pending = None
            if gate.status == "decided":
                self.next_step = gate.step + 1
            # held: the verdict says how the run goes on (a resumed step, or the next one)
            self.next_step = max(self.next_step, gate.step + 1)
        return gate

    def decision_seen(self, decision: Decision) -> Decision:
        self.pending = None
        self.next_step = max(self.next_step, decision.step + 1)
        return decision

    def verdict_seen(self, verdict: Verdict) -> Verdict:
        if verdict.resumed is not None:
            self.gate_seen(verdict.resumed)
        return verdict

    def results_path(self, step: int | None) -> str:
        step = self.pending if step is None else step
        if step is None:
            raise GuardianError("no step is waiting for results: call before() first")
        return f"/api/runs/{self.id}/steps/{step}/results/"


# ---- sync -------------------------------------------------------------------------------------


class Guardian:
    """A connection to Guardian. `token` is an API token (the admins' tokens page makes one)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )
        self._retries, self._backoff = retries, backoff

    def __enter__(self) -> Guardian:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, request: _Request) -> Any:
        for attempt in range(self._retries + 1):
            try:
                response = self._http.request(
                    request.method,
                    request.path,
                    json=request.json,
                    params=request.params,
                    headers=request.headers,
                    timeout=request.timeout or httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                if attempt == self._retries:
                    raise Unavailable(f"Guardian unreachable: {exc}") from exc
            else:
                if response.status_code not in RETRY_STATUSES or attempt == self._retries:
                    return _answer(response)
            time.sleep(self._backoff * 2**attempt)
        raise AssertionError("unreachable")

    def run(
        self,
        *,
        goal: str,
        tools: Sequence[Tool | str | Mapping],
        acceptance_criteria: Sequence[str] = (),
        guardian: str = "local",
        budgets: Mapping | None = None,
        config: Mapping | None = None,
        policy_version: int | None = None,
        webhook_url: str | None = None,
    ) -> Run:
        """Start an external run: Guardian guards it, the caller's loop drives it."""
        body = _run_body(
            goal=goal,
            tools=tools,
            acceptance_criteria=acceptance_criteria,
            guardian=guardian,
            budgets=budgets,
            config=config,
            policy_version=policy_version,
            webhook_url=webhook_url,
        )
        data = self._send(_start_request(body))
        return Run(self, data)

    def attach(self, run_id: int) -> Run:
        """A run started earlier (by another process, or before a restart), where it stands:
        its next step, a step waiting for results, an escalation waiting for a person."""
        return Run(self, self._send(_Request("GET", f"/api/runs/{run_id}/steps/")))


class Run:
    """One external run: propose steps with `before`, report results with `after`."""

    def __init__(self, guardian: Guardian, data: Mapping) -> None:
        self._g = guardian
        self.data = dict(data)
        self._state = _RunState(data)
        self.webhook_secret: str | None = data.get("webhook_secret")

    @property
    def id(self) -> int:
        return self._state.id

    @property
    def next_step(self) -> int:
        return self._state.next_step

    def before(
        self,
        *,
        message: str = "",
        calls: Sequence[Call | Mapping] = (),
        tokens: int = 0,
        cost: float = 0.0,
        step: int | None = None,
        user_messages: str | Sequence[UserMessage | str | Mapping] = (),
    ) -> Gate:
        """Ask before the step runs: every call validated, its risk checked, the whole step
        gated. Run exactly the gate's `runnable` calls, then call `after`.

        `user_messages` are what the user said to the agent since its last step, oldest first
        (UserMessage, or the text alone): Guardian records each with the step and writes it to
        the run's history ("user said: …") before the step's calls, so the risk check and the
        guardian read the conversation. Send each once, with the step that follows it; a retry
        of the step sends the same ones."""
        number = self._state.next_step if step is None else step
        body = _step_body(number, message, calls, tokens, cost, user_messages)
        data = self._g._send(_Request("POST", f"/api/runs/{self.id}/steps/", body))
        return self._state.gate_seen(Gate.from_json(data))

    def after(self, results: Sequence[Result | Mapping], *, step: int | None = None) -> Decision:
        """Report each runnable call's verbatim result (or error); Guardian decides the step."""
        body = {"results": [r.as_json() if isinstance(r, Result) else dict(r) for r in results]}
        data = self._g._send(_Request("POST", self._state.results_path(step), body))
        return self._state.decision_seen(Decision.from_json(data["decision"]))

    def step(self, number: int) -> Gate:
        """A step as Guardian recorded it (its gate, and its decision once there is one)."""
        data = self._g._send(_Request("GET", f"/api/runs/{self.id}/steps/{number}/"))
        return Gate.from_json(data)

    def summary(self) -> dict:
        """Where the run stands now: `status`, `final_answer`, `next_step`, `pending_step`,
        an open `escalation`."""
        return dict(self._g._send(_Request("GET", f"/api/runs/{self.id}/steps/")))

    def wait(
        self, escalation: Escalation | int, *, timeout: float | None = None, poll: float = 30.0
    ) -> Verdict:
        """Wait for a person's verdict, a long poll of at most `poll` seconds at a time, for up
        to `timeout` seconds in all (None: until there is one). A verdict not yet given comes
        back with `decided` False."""
        path = self._state.wait_path(escalation)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
            data = self._g._send(
                _Request(
                    "GET",
                    path,
                    params={"timeout": f"{left:g}"},
                    timeout=left + 10,
                )
            )
            verdict = self._state.verdict_seen(Verdict.from_json(data))
            if verdict.decided or (deadline is not None and time.monotonic() >= deadline):
                return verdict


# ---- async ------------------------------------------------------------------------------------


class AsyncGuardian:
    """The async twin of Guardian, for loops that run on asyncio (the Agents SDK's)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.25,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )
        self._retries, self._backoff = retries, backoff

    async def __aenter__(self) -> AsyncGuardian:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, request: _Request) -> Any:
        for attempt in range(self._retries + 1):
            try:
                response = await self._http.request(
                    request.method,
                    request.path,
                    json=request.json,
                    params=request.params,
                    headers=request.headers,
                    timeout=request.timeout or httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                if attempt == self._retries:
                    raise Unavailable(f"Guardian unreachable: {exc}") from exc
            else:
                if response.status_code not in RETRY_STATUSES or attempt == self._retries:
                    return _answer(response)
            await asyncio.sleep(self._backoff * 2**attempt)
        raise AssertionError("unreachable")

    async def run(
        self,
        *,
        goal: str,
        tools: Sequence[Tool | str | Mapping],
        acceptance_criteria: Sequence[str] = (),
        guardian: str = "local",
        budgets: Mapping | None = None,
        config: Mapping | None = None,
        policy_version: int | None = None,
        webhook_url: str | None = None,
    ) -> AsyncRun:
        body = _run_body(
            goal=goal,
            tools=tools,
            acceptance_criteria=acceptance_criteria,
            guardian=guardian,
            budgets=budgets,
            config=config,
            policy_version=policy_version,
            webhook_url=webhook_url,
        )
        return AsyncRun(self, await self._send(_start_request(body)))

    async def attach(self, run_id: int) -> AsyncRun:
        return AsyncRun(self, await self._send(_Request("GET", f"/api/runs/{run_id}/steps/")))


class AsyncRun:
    """The async twin of Run."""

    def __init__(self, guardian: AsyncGuardian, data: Mapping) -> None:
        self._g = guardian
        self.data = dict(data)
        self._state = _RunState(data)
        self.webhook_secret: str | None = data.get("webhook_secret")

    @property
    def id(self) -> int:
        return self._state.id

    @property
    def next_step(self) -> int:
        return self._state.next_step

    async def before(
        self,
        *,
        message: str = "",
        calls: Sequence[Call | Mapping] = (),
        tokens: int = 0,
        cost: float = 0.0,
        step: int | None = None,
        user_messages: str | Sequence[UserMessage | str | Mapping] = (),
    ) -> Gate:
        """Run.before, awaited (`user_messages` as there)."""
        number = self._state.next_step if step is None else step
        body = _step_body(number, message, calls, tokens, cost, user_messages)
        data = await self._g._send(_Request("POST", f"/api/runs/{self.id}/steps/", body))
        return self._state.gate_seen(Gate.from_json(data))

    async def after(
        self, results: Sequence[Result | Mapping], *, step: int | None = None
    ) -> Decision:
        body = {"results": [r.as_json() if isinstance(r, Result) else dict(r) for r in results]}
        data = await self._g._send(_Request("POST", self._state.results_path(step), body))
        return self._state.decision_seen(Decision.from_json(data["decision"]))

    async def summary(self) -> dict:
        return dict(await self._g._send(_Request("GET", f"/api/runs/{self.id}/steps/")))

    async def step(self, number: int) -> Gate:
        data = await self._g._send(_Request("GET", f"/api/runs/{self.id}/steps/{number}/"))
        return Gate.from_json(data)

    async def wait(
        self, escalation: Escalation | int, *, timeout: float | None = None, poll: float = 30.0
    ) -> Verdict:
        path = self._state.wait_path(escalation)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            left = poll if deadline is None else max(0.0, min(poll, deadline - loop.time()))
            data = await self._g._send(
                _Request(
                    "GET",
                    path,
                    params={"timeout": f"{left:g}"},
                    timeout=left + 10,
                )
            )
            verdict = self._state.verdict_seen(Verdict.from_json(data))
            if verdict.decided or (deadline is not None and loop.time() >= deadline):
                return verdict


__all__ = ["AsyncGuardian", "AsyncRun", "Conflict", "Guardian", "Run"]
