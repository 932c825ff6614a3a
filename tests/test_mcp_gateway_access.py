"""Who may talk to the gateway over HTTP (mcp_gateway/server.py BearerGate): a bearer token of
a user allowed to run agents on every request; a good token is asked of the database again
after TOKEN_RECHECK_SECONDS, so a revoked one is refused within that time, and a bad one is
never remembered."""

import anyio

from mcp_gateway.server import SCOPE_USER, BearerGate
from tests.client_helpers import anyio_run


class Tokens:
    """The database's answer about tokens, and how often it was asked."""

    def __init__(self) -> None:
        self.users = {"good": 7}
        self.asked = 0

    def resolve(self, token: str) -> int | None:
        self.asked += 1
        return self.users.get(token)


async def request(gate: BearerGate, token: str | None) -> tuple[int, object]:
    seen = {}

    async def app(scope, receive, send):
        seen["user"] = scope.get(SCOPE_USER)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    gate.app = app
    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    await gate(
        {"type": "http", "headers": headers, "method": "POST", "path": "/mcp"}, receive, send
    )
    return sent[0]["status"], seen.get("user")


def test_a_good_token_is_asked_of_the_database_once_within_the_recheck_time():
    anyio_run(_a_good_token_is_asked_once)


async def _a_good_token_is_asked_once():
    tokens = Tokens()
    gate = BearerGate(None, tokens.resolve, recheck_seconds=60)

    answers = [await request(gate, "good") for _ in range(5)]

    assert answers == [(200, 7)] * 5
    assert tokens.asked == 1


def test_a_revoked_token_is_refused_once_the_recheck_time_has_passed():
    anyio_run(_a_revoked_token_is_refused)


async def _a_revoked_token_is_refused():
    tokens = Tokens()
    gate = BearerGate(None, tokens.resolve, recheck_seconds=0.2)
    assert (await request(gate, "good"))[0] == 200
    del tokens.users["good"]  # revoked

    assert (await request(gate, "good"))[0] == 200  # still within the recheck time
    await anyio.sleep(0.25)
    assert (await request(gate, "good"))[0] == 401
    assert (await request(gate, "good"))[0] == 401
    assert tokens.asked == 3  # a bad token is asked every time, never remembered


def test_no_token_or_an_unknown_one_is_refused():
    anyio_run(_no_token_is_refused)


async def _no_token_is_refused():
    tokens = Tokens()
    gate = BearerGate(None, tokens.resolve)

    assert (await request(gate, None))[0] == 401
    assert (await request(gate, "forged"))[0] == 401
    assert tokens.asked == 1
