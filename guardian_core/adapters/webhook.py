"""HTTP webhook tools: a tool whose call POSTs its arguments and idempotency key to a URL."""

from collections.abc import Mapping

import httpx

from guardian_core.engine.conditions import RiskClass
from guardian_core.engine.tools import Tool


class WebhookError(RuntimeError):
    """The webhook did not accept the call; the loop records it and escalates."""


def webhook_tool(
    *,
    name: str,
    url: str,
    description: str,
    schema: Mapping,
    risk_class: RiskClass | str,
    timeout_seconds: float = 10.0,
    headers: Mapping[str, str] | None = None,
) -> Tool:
    """A Tool that POSTs {"tool", "arguments", "idempotency_key"} as JSON to `url`.

    The key also travels as the Idempotency-Key header, so the receiver can refuse a repeat.
    A 2xx answer's body is the (untrusted) result; anything else raises WebhookError.
    """

    def call(arguments: dict, *, idempotency_key: str) -> str:
        body = {"tool": name, "arguments": arguments, "idempotency_key": idempotency_key}
        try:
            response = httpx.post(
                url,
                json=body,
                headers={**(headers or {}), "Idempotency-Key": idempotency_key},
                timeout=timeout_seconds,
            )
        except httpx.HTTPError as exc:
            raise WebhookError(f"{name}: {type(exc).__name__}: {exc}") from exc
        if not response.is_success:
            raise WebhookError(f"{name}: HTTP {response.status_code}: {response.text[:300]}")
        return response.text

    return Tool(name=name, description=description, schema=schema, risk_class=risk_class, func=call)
