"""The embedded default's broker: kombu's filesystem transport, with each message written
whole before its name appears in the queue folder.

kombu's own transport creates the message file under its final name and then writes it; a
consumer polling the folder can take the file in between and read it empty, and the worker
then stops on the JSONDecodeError ("Unrecoverable error"), taking `make demo` down with it
(celery/kombu#1551). Here the message is written under a name the consumer skips (it takes
only names ending in `.<queue>.msg`) and renamed into place, which is atomic on one file
system: a consumer sees no message or the whole message.
"""

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """Put `payload` onto `queue`: written in full, then renamed into the queue folder."""
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = f"{final}.partial"
        try:
            with open(partial, "wb") as handle:
                handle.write(dumps(payload).encode())
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
