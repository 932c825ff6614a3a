"""The embedded default's broker never hands a worker a message that is still being written:
one process publishes while another consumes as fast as it can, and every message read is
whole. (kombu's own filesystem transport fails this: most reads came back empty, and a worker
stops on the first one, taking `make demo` down.)"""

import multiprocessing
import time
from queue import Empty

from django.conf import settings
from kombu import Connection

from guardian_core.celery import app

TRANSPORT = "guardian_core.filesystem_broker:Transport"
MESSAGES = 600
BODY = "x" * 50_000  # a write long enough to be caught half done


def _options(folder: str) -> dict:
    return {"data_folder_in": folder, "data_folder_out": folder, "polling_interval": 0.0}


def _publish(folder: str) -> None:
    with Connection("filesystem://localhost//", transport=TRANSPORT) as connection:
        connection.transport_options.update(_options(folder))
        channel = connection.channel()
        for number in range(MESSAGES):
            channel._put("work", {"body": BODY, "number": number})


def test_a_consumer_polling_while_another_process_publishes_reads_only_whole_messages(tmp_path):
    folder = str(tmp_path)
    publisher = multiprocessing.get_context("spawn").Process(target=_publish, args=(folder,))
    publisher.start()
    read, broken = [], []
    deadline = time.monotonic() + 120
    with Connection("filesystem://localhost//", transport=TRANSPORT) as connection:
        connection.transport_options.update(_options(folder))
        channel = connection.channel()
        while len(read) + len(broken) < MESSAGES and time.monotonic() < deadline:
            try:
                message = channel._get("work")
            except Empty:  # nothing whole there yet
                continue
            except Exception as exc:  # what a worker would stop on
                broken.append(repr(exc))
                continue
            read.append(message["number"])
    publisher.join(timeout=60)
    assert broken == []
    assert sorted(read) == list(range(MESSAGES))


def test_the_embedded_default_uses_it():
    assert settings.CELERY_BROKER_URL.startswith("filesystem:") == (
        app.conf.broker_transport == TRANSPORT
    )
