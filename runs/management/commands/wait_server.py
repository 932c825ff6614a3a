"""`manage.py wait_server`: the long polls of external runs' callers (GET
/api/escalations/<id>/wait) on one event loop under uvicorn (runs/wait_server.py), beside the
sync web server that serves everything else."""

import logging

from django.core.management.base import BaseCommand

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Serve GET /api/escalations/<id>/wait asynchronously: thousands of callers waiting for a "
        "person's verdict, no thread each. Point GUARDIAN_WAIT_URL at it."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="The address to listen on.")
        parser.add_argument("--port", type=int, default=8001, help="The port (default 8001).")

    def handle(self, *args, **options) -> None:
        import uvicorn

        from runs.wait_server import WaitServer

        host, port = options["host"], options["port"]
        app = WaitServer()
        logger.info("the wait server listens on http://%s:%d", host, port)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            # The app's own logging (LOGGING in the settings: plain or JSON lines), not uvicorn's.
            log_config=None,
            access_log=False,  # the app logs each request with its request id
            lifespan="on",
            # Held callers come and go by the thousand: a deep accept queue, and a caller that
            # lingers after its answer does not keep its connection long.
            backlog=4096,
            timeout_keep_alive=5,
            # Behind a proxy that says so (BEHIND_TLS_PROXY), the client's address from it.
            proxy_headers=True,
        )
        uvicorn.Server(config).run()
