"""`manage.py mcp_gateway --config FILE`: Guardian as an MCP gateway, over stdio or HTTP."""

from __future__ import annotations

import logging
import sys
import threading
import time

import anyio
from django.core.management.base import BaseCommand, CommandError

from mcp_gateway.access import REQUIRED_PERMISSIONS, token_user_id
from mcp_gateway.config import ConfigError, load_config
from mcp_gateway.upstream import UpstreamError

logger = logging.getLogger(__name__)


def _logs_to_stderr() -> None:
    """In stdio mode stdout is the protocol's: every log handler that writes to stdout is
    moved to stderr (the settings' console handler already writes there; this keeps it so
    whatever a deployment's LOGGING says)."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and handler.stream in (
                sys.stdout,
                sys.__stdout__,
            ):
                handler.setStream(sys.stderr)


class Command(BaseCommand):
    help = (
        "Serve MCP to a client (stdio or Streamable HTTP), every tool call guarded by Guardian "
        "before the upstream MCP servers named in the config run it."
    )
    # The gateway checks its own things at start; Django's system checks write to stdout.
    requires_system_checks: list = []

    def add_arguments(self, parser) -> None:
        parser.add_argument("--config", required=True, help="The gateway's TOML file.")
        parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
        parser.add_argument("--host", help="HTTP: the address to listen on (else the config's).")
        parser.add_argument("--port", type=int, help="HTTP: the port (else the config's).")

    def handle(self, *args, **options) -> None:
        transport = options["transport"]
        if transport == "stdio":
            _logs_to_stderr()
        try:
            config = load_config(options["config"])
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        token = config.api_token()
        owner_id = token_user_id(token)
        # Over HTTP each request's own token names its session's owner: the configured one is
        # then checked only when given (stdio's sessions are its user's).
        if owner_id is None and (transport == "stdio" or token):
            where = f"${config.token_env}" if config.token_env else "token"
            raise CommandError(
                f"{options['config']}: {where} is not a live Guardian API token of an active "
                f"user holding {' and '.join(REQUIRED_PERMISSIONS)}."
            )
        # The guardian's model loads while the upstreams start and the client connects: the
        # session's first call does not wait a second for it (a call that comes sooner waits
        # for the one load, not for a second one).
        threading.Thread(
            target=_guardian_warm, args=(config.guardian,), name="guardian-warm", daemon=True
        ).start()
        from mcp_gateway import server
        from runs.tools import tool_registry

        # Guardian's own tools' names: an upstream tool of one of these names is namespaced.
        reserved = frozenset(tool_registry())
        try:
            if transport == "stdio":
                anyio.run(lambda: server.run_stdio(config, owner_id=owner_id, reserved=reserved))
            else:
                anyio.run(
                    lambda: server.run_http(
                        config,
                        host=options["host"] or config.http.host,
                        port=options["port"] or config.http.port,
                        resolve_token=token_user_id,
                        reserved=reserved,
                    )
                )
        except KeyboardInterrupt:
            pass
        except BaseException as exc:
            failed = _upstream_error(exc)
            if failed is None:
                raise
            raise CommandError(str(failed)) from None


def _guardian_warm(adapter: str) -> None:
    """What a session's first call would otherwise load: the guardian's model, and the URLs
    (every answer links its escalation; reverse() imports every app's URLconf, ~0.4 s)."""
    from django.db import connection
    from django.urls import reverse

    from runs.ports import guardian_warm

    try:
        started = time.perf_counter()
        seconds = guardian_warm(adapter)
        reverse("escalations:queue")
        logger.info(
            "guardian %s ready: its model loaded in %.2f s, the first call's all in %.2f s",
            adapter,
            seconds,
            time.perf_counter() - started,
        )
    except Exception:  # its first call then loads it, or fails closed as any call would
        logger.exception("guardian %s: loading it at start failed", adapter)
    finally:
        connection.close()


def _upstream_error(exc: BaseException) -> UpstreamError | None:
    """The UpstreamError behind `exc`, which anyio may have wrapped in exception groups."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _upstream_error(inner)
            if found is not None:
                return found
    return None
