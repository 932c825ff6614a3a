"""The engine's ports for one run: its actor, its guardian and its tools, built from the run's
adapter names and settings, and the tool wrapper that records every call before it runs."""

from collections.abc import Callable

from django.conf import settings
from django.utils import timezone

from guardian_core.adapters.scripted import ScriptedActor, ScriptedGuardian
from guardian_core.engine.canonical import canonical_json
from guardian_core.engine.conditions import RiskClass
from guardian_core.engine.loop import Actor, Guardian
from guardian_core.engine.tools import Tool
from runs.models import Run, ToolCall, ToolCallStatus, Turn


class AmbiguousCall(RuntimeError):
    """An irreversible call started before a crash and never finished: a person must check."""


def build_actor(run: Run, tools: dict[str, Tool]) -> Actor:
    if run.actor == "scripted":
        return ScriptedActor(run.config["scenario"])
    if run.actor == "openai":
        from guardian_core.adapters.openai import OpenAIActor

        return OpenAIActor(
            settings.OPENAI_BASE_URL,
            run.config.get("actor_model") or settings.OPENAI_ACTOR_MODEL,
            tools,
            api_key=settings.OPENAI_API_KEY or None,
        )
    raise ValueError(f"unknown actor adapter {run.actor!r}")


def build_guardian(run: Run) -> Guardian:
    deadline = settings.GUARDIAN_DEADLINE_SECONDS
    if run.guardian == "scripted":
        return ScriptedGuardian(run.config["scenario"], deadline_seconds=deadline)
    if run.guardian == "local":
        from guardian_core.adapters.local import LocalGuardian

        return LocalGuardian(deadline_seconds=deadline)
    if run.guardian == "http":
        from guardian_core.adapters.http import HttpGuardian

        return HttpGuardian(
            settings.GUARDIAN_HTTP_URL,
            api_key=settings.GUARDIAN_HTTP_API_KEY or None,
            timeout_seconds=deadline,
            model_version=settings.GUARDIAN_HTTP_MODEL_VERSION,
        )
    if run.guardian == "openai":
        from guardian_core.adapters.openai import OpenAIGuardian

        return OpenAIGuardian(
            settings.OPENAI_BASE_URL,
            settings.OPENAI_GUARDIAN_MODEL,
            api_key=settings.OPENAI_API_KEY or None,
            timeout_seconds=deadline,
        )
    raise ValueError(f"unknown guardian adapter {run.guardian!r}")


def recording_tools(
    tools: dict[str, Tool], *, turn: Turn, calls_by_key: dict[str, tuple[int, str]]
) -> dict[str, Tool]:
    """The run's tools, each wrapped so that a call is recorded as started before it runs and
    as done after, in their own short transactions (no lock is held while a tool runs).

    A key already done returns its stored result instead of running again. A key found started
    but never finished (the worker died) is ambiguous: a read-only or reversible call is run
    again with the same key; an irreversible or regulated one is never retried blindly.
    """
    return {
        name: Tool(
            name=tool.name,
            description=tool.description,
            schema=tool.schema,
            risk_class=tool.risk_class,
            func=_recorded(tool, turn, calls_by_key),
        )
        for name, tool in tools.items()
    }


def _recorded(tool: Tool, turn: Turn, calls_by_key) -> Callable[..., object]:
    def call(arguments: dict, *, idempotency_key: str) -> object:
        position, intent = calls_by_key[idempotency_key]
        existing = ToolCall.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None and existing.status == ToolCallStatus.DONE:
            return existing.result
        if existing is not None:
            if RiskClass(tool.risk_class).needs_approval:
                ToolCall.objects.filter(pk=existing.pk).update(status=ToolCallStatus.AMBIGUOUS)
                raise AmbiguousCall(
                    f"{tool.name} {arguments} started at {existing.started_at:%Y-%m-%d %H:%M:%S} "
                    "and was never recorded as done: did it go through? It is not retried."
                )
            ToolCall.objects.filter(pk=existing.pk).update(
                status=ToolCallStatus.STARTED, started_at=timezone.now(), error=""
            )
        else:
            existing = ToolCall.objects.create(
                turn=turn,
                position=position,
                tool=tool.name,
                arguments=arguments,
                intent=intent,
                risk_class=tool.risk_class,
                status=ToolCallStatus.STARTED,
                idempotency_key=idempotency_key,
                started_at=timezone.now(),
            )
        try:
            result = tool.func(arguments, idempotency_key=idempotency_key)
        except Exception as exc:
            ToolCall.objects.filter(pk=existing.pk).update(
                status=ToolCallStatus.FAILED,
                error=f"{type(exc).__name__}: {exc}"[:2000],
                finished_at=timezone.now(),
            )
            raise
        text = result if isinstance(result, str) else canonical_json(result)
        ToolCall.objects.filter(pk=existing.pk).update(
            status=ToolCallStatus.DONE, result=text, finished_at=timezone.now()
        )
        return text

    return call
