"""The load test's traffic, all in one asyncio event loop: the outside loops (one
httpx.AsyncClient and one API token each), the scripted reviewer answering held steps through
the API, the reviewer watching the queue page, and a sampler of PostgreSQL's connections.

Nothing here retries a failure: a status the protocol does not answer with, a timeout or a
refused connection is an error, counted and kept (the first few in words). The one answer
that is sent again is the protocol's own "409 … retry in a moment" (another request holds the
run for a moment), counted apart as a busy answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from dataclasses import dataclass, field

import httpx

# The soak's outside loops' tools: the same read and the same irreversible refund.
from soak.load import LOOKUP, REFUND

# One request's longest wait: gunicorn's own timeout, so a request the server dropped is an
# error here rather than a hang.
REQUEST_TIMEOUT = 60.0
# gunicorn closes a keep-alive connection idle for 2 s (its --keep-alive default): a client
# that keeps one longer may send a request on a socket being closed (a ReadError that no real
# failure caused), so each client drops its idle connections after 1 s.
LIMITS = httpx.Limits(keepalive_expiry=1.0)
# How long a held loop waits for its verdict after the load's end before that is an error.
VERDICT_GRACE = 120.0
# With --wait-timeout under a second the held loop polls (a pause of this long between asks)
# instead of long-polling: a long poll holds one of gunicorn's threads for its whole timeout.
POLL_SECONDS = 1.0
KEEP_ERRORS = 10  # the first errors kept in words

GOAL = "load: read each order in the customer's list and refund the broken ones"
# A run long enough to outlast any load: it ends when the load does, not on a budget.
BUDGETS = {"max_turns": 100_000, "max_tokens": 10_000_000}


class LoadError(Exception):
    """A call that did not get the answer the protocol promises."""


@dataclass
class Tally:
    """What every task saw: latencies by call (ms), counts, and the errors."""

    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    steps: int = 0  # steps decided (results reported and a decision back)
    held: int = 0  # steps held for a person, then answered
    runs: int = 0
    busy: int = 0  # "409 … retry in a moment", sent again
    verdicts: int = 0
    pg_connections: list[int] = field(default_factory=list)
    escalation_kinds: dict[str, int] = field(default_factory=dict)

    def timed(self, name: str, ms: float) -> None:
        self.latencies.setdefault(name, []).append(ms)

    def error(self, text: str) -> None:
        """Counted; kept in words when it is one of the first KEEP_ERRORS different ones."""
        self.error_count += 1
        if len(self.errors) < KEEP_ERRORS and text[:400] not in self.errors:
            self.errors.append(text[:400])


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less when `stop` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _send(
    client: httpx.AsyncClient,
    tally: Tally,
    name: str,
    method: str,
    path: str,
    *,
    ok: tuple[int, ...] = (200,),
    **kwargs,
) -> httpx.Response:
    """One API call, timed under `name`; LoadError unless its status is in `ok`."""
    while True:
        started = time.perf_counter()
        try:
            answer = await client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise LoadError(f"{name} {method} {path}: {type(exc).__name__}: {exc}") from exc
        ms = (time.perf_counter() - started) * 1000
        if answer.status_code == 409 and "retry in a moment" in answer.text:
            tally.busy += 1
            await asyncio.sleep(0.1)
            continue
        if answer.status_code not in ok:
            raise LoadError(
                f"{name} {method} {path}: HTTP {answer.status_code} {answer.text[:200]!r}"
            )
        tally.timed(name, ms)
        return answer


class OutsideLoop:
    """One agent loop that runs elsewhere: starts an external run and steps it until the load
    ends (a new run when one ends); a held step waits for its verdict on the wait endpoint."""

    def __init__(
        self,
        *,
        index: int,
        url: str,
        token: str,
        tally: Tally,
        held_fraction: float,
        deadline: float,
        wait_timeout: float,
        guardian: str,
        seed: int,
    ) -> None:
        self.index, self.url, self.token, self.tally = index, url, token, tally
        self.held_fraction, self.deadline = held_fraction, deadline
        self.wait_timeout, self.guardian = wait_timeout, guardian
        self.rng = random.Random(seed)
        self.orders = 0

    async def drive(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=REQUEST_TIMEOUT, limits=LIMITS
        ) as client:
            while time.monotonic() < self.deadline:
                try:
                    await self._one_run(client)
                except LoadError as exc:
                    self.tally.error(f"loop {self.index}: {exc}")
                    # A new run after a pause: the failure is counted, not hammered.
                    await asyncio.sleep(1.0)

    def _run_body(self) -> dict:
        body = {
            "goal": GOAL,
            "acceptance_criteria": ["Every listed order read", "Each broken one refunded"],
            "actor": "external",
            "guardian": self.guardian,
            "tools": [LOOKUP, REFUND],
            "budgets": BUDGETS,
            "config": {},
        }
        if self.guardian == "scripted":
            # Calm answers from the scripted guardian (as bench/external_step.py): the server's
            # own cost, no model's.
            body["config"] = {
                "scenario": {
                    "name": "load",
                    "goal": GOAL,
                    "actor": {"turns": []},
                    "guardian": {"model_version": "scripted-load"},
                }
            }
        return body

    async def _one_run(self, client: httpx.AsyncClient) -> None:
        started = await _send(
            client,
            self.tally,
            "start",
            "POST",
            "/api/runs/start/",
            ok=(200, 201),
            json=self._run_body(),
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
        run = started.json()["id"]
        self.tally.runs += 1
        step = 0
        while time.monotonic() < self.deadline:
            self.orders += 1
            order = f"ord_{self.index:03d}_{self.orders:05d}"
            if self.rng.random() < self.held_fraction:
                call = {"tool": "refund_order", "arguments": {"order_id": order, "amount": 49.9}}
                message = f"Refunding {order}: it arrived broken."
            else:
                call = {"tool": "lookup_order", "arguments": {"order_id": order}}
                message = f"Reading {order}."
            proposed = await _send(
                client,
                self.tally,
                "propose",
                "POST",
                f"/api/runs/{run}/steps/",
                ok=(200, 201),
                json={"step": step, "message": message, "calls": [call], "tokens": 10},
            )
            may_continue, step = await self._settle(client, run, proposed.json())
            if not may_continue:
                return

    async def _settle(self, client: httpx.AsyncClient, run: int, answer: dict) -> tuple[bool, int]:
        """Take a step's answer to its decision: (whether the run goes on, the next step)."""
        while True:
            status = answer["status"]
            if status == "opening":  # another request checks its approvals: read it again
                await asyncio.sleep(0.1)
                answer = (
                    await _send(
                        client,
                        self.tally,
                        "read step",
                        "GET",
                        f"/api/runs/{run}/steps/{answer['step']}/",
                    )
                ).json()
            elif status == "held":
                verdict = await self._verdict(client, answer["escalation"])
                self.tally.held += 1
                if verdict["resumed"] is None:
                    return verdict["may_continue"], await self._next_step(client, run)
                answer = verdict["resumed"]
            elif status == "run":
                results = [
                    {"position": c["position"], "result": f"{c['tool']}: done for 49.90"}
                    for c in answer["calls"]
                    if c["status"] == "run"
                ]
                decided = (
                    await _send(
                        client,
                        self.tally,
                        "results",
                        "POST",
                        answer["results_url"],
                        json={"results": results},
                    )
                ).json()
                self.tally.steps += 1
                return await self._after_decision(client, run, decided)
            elif status == "decided":
                return await self._after_decision(client, run, answer)
            elif status == "cancelled":
                return False, answer["step"] + 1
            else:
                raise LoadError(f"run {run} step {answer['step']}: status {status!r}")

    async def _after_decision(
        self, client: httpx.AsyncClient, run: int, answer: dict
    ) -> tuple[bool, int]:
        decision = answer["decision"]
        if decision is None:
            raise LoadError(f"run {run} step {answer['step']}: no decision in {answer}")
        if decision["outcome"] == "escalate" and decision["escalation"]:
            verdict = await self._verdict(client, decision["escalation"])
            return verdict["may_continue"], await self._next_step(client, run)
        return decision["may_continue"], answer["step"] + 1

    async def _next_step(self, client: httpx.AsyncClient, run: int) -> int:
        summary = await _send(client, self.tally, "read run", "GET", f"/api/runs/{run}/steps/")
        return summary.json()["next_step"]

    async def _verdict(self, client: httpx.AsyncClient, escalation: dict) -> dict:
        """Wait on the escalation (bounded long polls) until a person answered it."""
        held_at = time.perf_counter()
        while True:
            verdict = (
                await _send(
                    client,
                    self.tally,
                    "wait",
                    "GET",
                    escalation["wait_url"],
                    params={"timeout": self.wait_timeout},
                )
            ).json()
            if verdict["status"] != "open":
                self.tally.timed("held until answered", (time.perf_counter() - held_at) * 1000)
                return verdict
            if time.monotonic() > self.deadline + VERDICT_GRACE:
                raise LoadError(f"no verdict on escalation {escalation['id']} in time")
            if self.wait_timeout < POLL_SECONDS:  # polling, not a long poll: a pause between
                await asyncio.sleep(POLL_SECONDS)


class Reviewer:
    """A scripted reviewer answering through the API: approves every held step as shown (a
    second reviewer when a quorum asks for one), answers the guardian's open questions as
    calm (the run goes on), and rejects any other escalation (which ends its run). An
    escalation whose verdict failed is tried again on the next pass."""

    def __init__(self, *, url: str, tokens: list[str], tally: Tally, parallel: int = 4) -> None:
        self.url, self.tokens, self.tally = url, tokens, tally
        self.seen: set[int] = set()
        self.slots = asyncio.Semaphore(parallel)
        self.tasks: set[asyncio.Task] = set()

    async def serve(self, stop: asyncio.Event) -> None:
        clients = [
            httpx.AsyncClient(
                base_url=self.url,
                headers={"Authorization": f"Bearer {token}"},
                timeout=REQUEST_TIMEOUT,
                limits=LIMITS,
            )
            for token in self.tokens
        ]
        try:
            while not stop.is_set():
                try:
                    for item in await self._open(clients[0]):
                        if item["id"] not in self.seen:
                            self.seen.add(item["id"])
                            task = asyncio.create_task(self._decide(clients, item["id"]))
                            self.tasks.add(task)
                            task.add_done_callback(self.tasks.discard)
                except LoadError as exc:
                    self.tally.error(f"reviewer: {exc}")
                await _pause(stop, 0.2)
            if self.tasks:
                await asyncio.gather(*self.tasks)
        finally:
            for client in clients:
                await client.aclose()

    async def _open(self, client: httpx.AsyncClient) -> list[dict]:
        """Every open escalation, page by page."""
        items, path, params = [], "/api/escalations/", {"limit": 200}
        while path:
            page = await _send(client, self.tally, "reviewer: list", "GET", path, params=params)
            body = page.json()
            items += body["results"]
            path, params = body.get("next"), None
        return items

    async def _decide(self, clients: list[httpx.AsyncClient], pk: int) -> None:
        async with self.slots:
            try:
                detail = await _send(
                    clients[0], self.tally, "reviewer: read", "GET", f"/api/escalations/{pk}/"
                )
                escalation = detail.json()
                kinds = self.tally.escalation_kinds
                kinds[escalation["kind"]] = kinds.get(escalation["kind"], 0) + 1
                body = _verdict_body(escalation)
                resolved = await _send(
                    clients[0],
                    self.tally,
                    "reviewer: verdict",
                    "POST",
                    f"/api/escalations/{pk}/resolve/",
                    ok=(200, 202),
                    json=body,
                )
                if resolved.status_code == 202 and len(clients) > 1:  # a quorum's second
                    await _send(
                        clients[1],
                        self.tally,
                        "reviewer: verdict",
                        "POST",
                        f"/api/escalations/{pk}/resolve/",
                        json=body,
                    )
                self.tally.verdicts += 1
            except LoadError as exc:
                self.tally.error(f"reviewer: {exc}")


# A person's answer to each question the guardian was unsure of, where nothing is wrong: a read
# is read-only, no drift, no stagnation, not done yet, not infeasible, no injected instruction.
CALM = {"risk": "read_only", "drift": 0}


def _verdict_body(escalation: dict) -> dict:
    if escalation["kind"] == "gated_step":
        held = escalation["held_calls"]
        return {
            "decision": "approve",
            "seen_hashes": {str(c["position"]): c["action_hash"] for c in held},
        }
    questions = escalation.get("questions") or []
    if questions:  # the guardian unsure: the person's calm answer, and the run goes on
        return {"decision": "answer", "answer": {q: CALM.get(q, False) for q in questions}}
    return {"decision": "reject", "reason": "load: ended by the reviewer"}


async def watch_queue_page(
    *, url: str, cookie: str, tally: Tally, stop: asyncio.Event, every: float
) -> None:
    """A reviewer with the queue page open: fetch it every `every` seconds, timed."""
    async with httpx.AsyncClient(
        base_url=url, headers={"Cookie": cookie}, timeout=REQUEST_TIMEOUT, limits=LIMITS
    ) as client:
        while not stop.is_set():
            try:
                page = await _send(client, tally, "queue page", "GET", "/escalations/")
                if "<html" not in page.text[:500].lower():
                    raise LoadError(f"queue page: not a page: {page.text[:200]!r}")
            except LoadError as exc:
                tally.error(f"queue page: {exc}")
            await _pause(stop, every)


async def sample_pg_connections(
    *, database_url: str, tally: Tally, stop: asyncio.Event, every: float = 0.5
) -> None:
    """PostgreSQL's open connections to the app's database, twice a second (this one apart)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        while not stop.is_set():
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            tally.pg_connections.append((await cursor.fetchone())[0])
            await _pause(stop, every)
