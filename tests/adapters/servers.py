"""Real HTTP servers on 127.0.0.1 for the adapter tests: no mocking of the HTTP client.

`serve(handler)` starts a ThreadingHTTPServer on a free port in a thread and shuts it down on
exit. A handler is a function (path, headers, json_body) -> (status, json_or_bytes, delay) and
can be swapped per test; every request is recorded (method, path, headers, raw body, decoded
JSON) for assertions. Builders below speak the vendor contract of docs/adapters.md and the
OpenAI chat-completions shape (logprobs and tool_calls as the real API sends them).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (status, body, delay_seconds): a body that is bytes is sent as is, anything else as JSON.
Reply = tuple[int, object, float]
Handler = Callable[[str, Mapping[str, str], object], Reply]


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it. Header names are lower-cased."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    json: object  # None when the body is not JSON


@dataclass
class FakeServer:
    """A running server: its base URL, the requests it received, and its current handler."""

    handler: Handler
    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    # Set on shutdown: wakes handlers that are sleeping out a delay, so teardown is quick.
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, request: Recorded) -> None:
        with self.lock:
            self.requests.append(request)

    @property
    def last(self) -> Recorded:
        with self.lock:
            return self.requests[-1]


def _handler_class(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            try:
                decoded = json.loads(body)
            except ValueError:
                decoded = None
            headers = {name.lower(): value for name, value in self.headers.items()}
            server.record(Recorded("POST", self.path, headers, body, decoded))
            status, payload, delay = server.handler(self.path, headers, decoded)
            if delay and server.stopping.wait(delay):
                return  # shutting down: the client gave up long ago
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            kind = "application/octet-stream" if isinstance(payload, bytes) else "application/json"
            try:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client timed out and closed the connection: expected in tests

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # keep the test output clean

    return _Handler


@contextlib.contextmanager
def serve(handler: Handler) -> Iterator[FakeServer]:
    """A server on 127.0.0.1 (port 0: the OS picks a free one), shut down on exit."""
    server = FakeServer(handler)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(server))
    httpd.daemon_threads = True
    httpd.block_on_close = False  # a handler still sleeping must not hold up teardown
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield server
    finally:
        server.stopping.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connecting is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# ---- the vendor decision-model contract (docs/adapters.md) -----------------------------------


def vendor(
    answers: Mapping[str, object] | Callable[[object], Mapping[str, object]],
    *,
    model_version: str = "vendor-x-2026-10",
    status: int = 200,
    delay: float = 0.0,
    usage: Mapping[str, object] | None = None,
) -> Handler:
    """A vendor endpoint answering `answers` (or answers(request_json)) for the conditions it
    was asked about, with the given model version (and `usage`, the optional field, if given)."""

    def handle(path: str, headers: Mapping[str, str], body: object) -> Reply:
        given = answers(body) if callable(answers) else answers
        asked = [q["condition"] for q in body["questions"]] if isinstance(body, dict) else []
        chosen = {name: value for name, value in given.items() if name in asked}
        reply: dict = {"model_version": model_version, "answers": chosen}
        if usage is not None:
            reply["usage"] = dict(usage)
        return status, reply, delay

    return handle


# ---- OpenAI-compatible chat completions -------------------------------------------------------


def completion(
    *,
    model: str,
    content: str | None = None,
    top_logprobs: Sequence[tuple[str, float]] | None = None,
    tool_calls: Sequence[Mapping] | None = None,
    finish_reason: str = "stop",
    total_tokens: int = 42,
    usage: Mapping[str, object] | None | str = "from total_tokens",
) -> dict:
    """A chat.completion object in the shape the OpenAI API returns. `usage` replaces the usage
    made from `total_tokens`; None leaves the field out (some servers send none)."""
    message: dict = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls is not None:
        message["tool_calls"] = list(tool_calls)
    choice: dict = {"index": 0, "message": message, "finish_reason": finish_reason}
    if top_logprobs is not None:
        token, logprob = top_logprobs[0]
        choice["logprobs"] = {
            "content": [
                {
                    "token": token,
                    "logprob": logprob,
                    "bytes": list(token.encode()),
                    "top_logprobs": [
                        {"token": t, "logprob": lp, "bytes": list(t.encode())}
                        for t, lp in top_logprobs
                    ],
                }
            ],
            "refusal": None,
        }
    else:
        choice["logprobs"] = None
    body: dict = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_790_000_000,
        "model": model,
        "choices": [choice],
    }
    if usage == "from total_tokens":
        body["usage"] = {
            "prompt_tokens": total_tokens - 1,
            "completion_tokens": 1,
            "total_tokens": total_tokens,
        }
    elif usage is not None:
        body["usage"] = dict(usage)
    return body


def tool_call(call_id: str, name: str, arguments: str) -> dict:
    """One entry of message.tool_calls, as OpenAI sends it (arguments are JSON text)."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def question_of(body: object) -> str:
    """The text of the last user message of a chat request (where the question is asked)."""
    messages = body["messages"] if isinstance(body, dict) else []
    users = [m["content"] for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


# ---- a coder and a reviewer on one chat server -------------------------------------------------


def chat_completion(
    model: str,
    content: str | None,
    *,
    finish_reason: str = "stop",
    refusal: str | None = None,
    prompt_tokens: int = 100,
    completion_tokens: int = 20,
) -> dict:
    """A plain chat answer (no logprobs, no tools), with a `refusal` field if given."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    body = completion(model=model, content=content, finish_reason=finish_reason, usage=usage)
    body["choices"][0]["message"]["refusal"] = refusal
    return body


def chat_by_model(replies: Mapping[str, Sequence[object]]) -> Handler:
    """A chat server for several models (a coder and a reviewer): the answer to a request for
    `model` is replies[model][n], n being the number of assistant messages in the request (the
    model's own earlier answers), so a request sent again gets the same answer. An entry is a
    completion body, or a callable(request_json) -> body, called as the request arrives (to
    block it, say). An unknown model is a 404, a request past the script a 500."""

    def handle(path: str, headers: Mapping[str, str], body: object) -> Reply:
        model = body.get("model") if isinstance(body, dict) else None
        if model not in replies:
            return 404, {"error": {"message": f"unknown model {model!r}"}}, 0.0
        messages = body.get("messages") or []
        n = sum(1 for message in messages if message.get("role") == "assistant")
        if n >= len(replies[model]):
            return 500, {"error": {"message": f"{model}: no answer {n} scripted"}}, 0.0
        entry = replies[model][n]
        return 200, entry(body) if callable(entry) else entry, 0.0

    return handle
