"""A faulty proxy on 127.0.0.1 in front of a live Guardian, for the client's retry tests: it
forwards every request, but may answer 503 instead, before forwarding (the request never
arrived) or after (Guardian acted and its answer was lost on the way back)."""

import http.server
import threading
from collections.abc import Callable

import httpx

Fault = Callable[[str, str], bool]  # (method, path) → whether this request meets the fault


def _never(method: str, path: str) -> bool:
    return False


class FaultyProxy:
    """`before(method, path)`: answer 503 without forwarding; `after(method, path)`: forward,
    then answer 503 instead of Guardian's answer. `forwarded` and `lost` count both."""

    def __init__(self, upstream: str, *, before: Fault = _never, after: Fault = _never) -> None:
        self.forwarded = 0
        self.lost = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _pass(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if before(self.command, self.path):
                    self._unavailable()
                    return
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in {"host", "content-length"}
                }
                answer = httpx.request(
                    self.command, upstream + self.path, content=body, headers=headers, timeout=30
                )
                proxy.forwarded += 1
                if after(self.command, self.path):
                    proxy.lost += 1
                    self._unavailable()
                    return
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("content-type", ""))
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def _unavailable(self) -> None:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _pass  # noqa: N815 - the stdlib's names

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def first_of_each_path() -> Fault:
    """A fault met by the first request of each method and path, and by no retry of it."""
    seen: set[str] = set()

    def fault(method: str, path: str) -> bool:
        key = f"{method} {path}"
        if key in seen:
            return False
        seen.add(key)
        return True

    return fault
