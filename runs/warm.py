"""Warming a process that serves steps when it starts (guardian_core/warming.py sends the
signal): the guardian's model and the URL configuration, so that the process's first step
costs what any step does instead of 1-2 s more."""

import logging
import time

from django.conf import settings
from django.urls import reverse

from runs.ports import guardian_warm

logger = logging.getLogger(__name__)


def warm_adapters() -> list[str]:
    """The guardian adapters with a model to load in this process: the embedded local one,
    and the ONNX one when it is configured. (The scripted, HTTP and OpenAI ones load nothing.)"""
    return ["local", *(["onnx"] if settings.GUARDIAN_ONNX_MODELS else [])]


def process_warm(sender: str = "", **kwargs) -> dict[str, float]:
    """Load every guardian adapter's model (its active version's, when one is active) and the
    URLs (every answer names its results URL); {adapter: seconds}."""
    started = time.perf_counter()
    loaded = {}
    for adapter in warm_adapters():
        loaded[adapter] = guardian_warm(adapter)
    reverse("api:run-steps", args=[1])
    logger.info(
        "%s: guardian models ready in %.2f s (%s)",
        sender or "process",
        time.perf_counter() - started,
        ", ".join(f"{adapter} {seconds:.2f} s" for adapter, seconds in loaded.items()),
    )
    return loaded
