"""The tools runs may use, built from settings: GUARDIAN_TOOLS (dotted paths to Tool objects)
and GUARDIAN_WEBHOOK_TOOLS (HTTP webhook tools described by name, URL, schema and risk class)."""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from guardian_core.adapters.webhook import webhook_tool
from guardian_core.engine.tools import Tool
from runs.models import Run


def tool_registry() -> dict[str, Tool]:
    """Every registered tool by name; a bad entry is a configuration error naming it."""
    tools: dict[str, Tool] = {}
    for path in settings.GUARDIAN_TOOLS:
        try:
            tool = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(f"GUARDIAN_TOOLS: cannot import {path}: {exc}") from None
        if not isinstance(tool, Tool):
            raise ImproperlyConfigured(f"GUARDIAN_TOOLS: {path} is not a Tool")
        tools[tool.name] = tool
    for name, spec in settings.GUARDIAN_WEBHOOK_TOOLS.items():
        try:
            tools[name] = webhook_tool(name=name, **spec)
        except (TypeError, ValueError) as exc:
            raise ImproperlyConfigured(f"GUARDIAN_WEBHOOK_TOOLS[{name!r}]: {exc}") from None
    return tools


def tools_for_run(names: list[str]) -> dict[str, Tool]:
    """The registered tools a run may use; raises ValueError naming every unknown one."""
    registry = tool_registry()
    unknown = sorted(set(names) - set(registry))
    if unknown:
        known = ", ".join(sorted(registry))
        raise ValueError(f"unknown tools: {', '.join(unknown)} (registered: {known})")
    return {name: registry[name] for name in names}


def run_tools(run) -> dict[str, Tool]:
    """The tools a run knows by name: the registered ones it names (those still registered)
    and, for an external run, the ones it defined itself (`config.tools`), which run in the
    caller's process and so are never called here. For its pages, its reviews and an external
    run's steps; a run Guardian drives itself takes tools_for_run, which refuses a name that
    is no longer registered."""
    registry = tool_registry()
    tools = {name: registry[name] for name in run.tools or [] if name in registry}
    for item in (run.config or {}).get("tools") or []:
        tools[item["name"]] = Tool(
            name=item["name"],
            description=item.get("description", ""),
            schema=item.get("parameters", {"type": "object"}),
            risk_class=item.get("risk_class", "read_only"),
            func=_runs_elsewhere,
        )
    return tools


def _runs_elsewhere(arguments: dict, *, idempotency_key: str) -> object:
    raise RuntimeError("an external run's tools run in the caller's process, not here")


def registered_tool_names() -> set[str]:
    """Every tool a run may name: the registry's, and those external runs brought along."""
    names = set(tool_registry())
    for tools in Run.objects.filter(actor="external").values_list("tools", flat=True).distinct():
        names.update(name for name in tools or () if isinstance(name, str))
    return names
