"""An OpenAI-compatible chat model as the coder or the reviewer of the coder/reviewer loop
(guardian_core/engine/reviewer_loop.py's Agent port).

Each call sends the role's whole append-only history as chat messages and maps the answer to
the engine's ModelReply:

* finish_reason "stop" is a complete answer ("end_turn"); "length" is truncated output
  ("max_tokens"), which the engine raises on; "content_filter", or a non-empty `refusal`
  field, is a refusal, which the engine escalates; anything else ("tool_calls", ...) the
  engine raises on as an unexpected stop.
* The model version is the response's `model` field (what actually answered, e.g. the dated
  snapshot behind an alias); a response without one is an error.
* Tokens come from the response's `usage`, and the cost from them with the price of the model
  (a table handed in by the caller: the adapters do not read settings).

Any failure to get an answer (timeout, refused connection, HTTP error, a body that is not a
chat completion) raises ChatAgentError: it is neither code nor a verdict, and the caller
records the failed turn and retries it.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from guardian_core.adapters.http import ClientOwner, EndpointError, bearer
from guardian_core.adapters.openai import chat_url
from guardian_core.adapters.pricing import Price, spend_from_usage
from guardian_core.engine.reviewer_loop import REFUSAL_STOP_REASON, Message, ModelReply

# OpenAI's finish_reason in the engine's words (its stop reasons are Anthropic's).
FINISH_REASONS: Mapping[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": REFUSAL_STOP_REASON,
    "tool_calls": "tool_use",
    "function_call": "tool_use",
}


class ChatAgentError(RuntimeError):
    """The chat endpoint gave no usable answer; the message says why (never the API key)."""


class OpenAIChatAgent(ClientOwner):
    """A coder or reviewer on an OpenAI-compatible chat-completions endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_seconds: float = 60.0,
        prices: Mapping[str, Price] | None = None,
        max_tokens: int | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("model must be the model name, as non-empty text")
        if not timeout_seconds > 0:
            raise ValueError("timeout_seconds must be positive")
        self.url = chat_url(base_url)
        self.model = model
        self.timeout_seconds = float(timeout_seconds)
        self.prices = dict(prices or {})
        self.max_tokens = max_tokens
        self._headers = bearer(api_key)
        self._use_client(client)

    def __repr__(self) -> str:  # never shows the API key
        return f"OpenAIChatAgent({self.url!r}, {self.model!r})"

    def request_body(self, history: tuple[Message, ...]) -> dict:
        """The JSON body of the request for `history` (every message, verbatim)."""
        body: dict = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in history],
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    def reply(self, history: tuple[Message, ...]) -> ModelReply:
        """The model's answer to `history`. Raises ChatAgentError when there is none."""
        try:
            body = self._post(self.request_body(history))
        except EndpointError as exc:
            raise ChatAgentError(f"chat endpoint {exc}") from exc
        return self.reply_from_completion(body)

    def reply_from_completion(self, body: object) -> ModelReply:
        """The ModelReply a chat completion gives; raises ChatAgentError when it is not one."""
        if not isinstance(body, dict):
            raise ChatAgentError("chat response is not a JSON object")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise ChatAgentError("chat response names no model: its version cannot be logged")
        choices = body.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise ChatAgentError("chat response has no choices[0].message object")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise ChatAgentError("chat response's message content is not text")
        refusal = message.get("refusal")
        finish = choice.get("finish_reason")
        if isinstance(refusal, str) and refusal.strip():
            # The refusal text is what the human gate should read.
            stop_reason, text = REFUSAL_STOP_REASON, refusal
        else:
            stop_reason = FINISH_REASONS.get(finish, str(finish)) if finish else "missing"
            text = content or ""
        price = self.prices.get(model) or self.prices.get(self.model)
        spend = spend_from_usage(body.get("usage"), price)
        return ModelReply(
            text=text,
            stop_reason=stop_reason,
            tokens=spend.tokens,
            cost=spend.cost,
            model_version=model,
        )
