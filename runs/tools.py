"""The tools runs may use, built from settings: GUARDIAN_TOOLS (dotted paths to Tool objects)
and GUARDIAN_WEBHOOK_TOOLS (HTTP webhook tools described by name, URL, schema and risk class)."""

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from guardian_core.adapters.webhook import webhook_tool
from guardian_core.engine.tools import Tool


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
