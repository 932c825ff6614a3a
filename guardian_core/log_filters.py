"""Logging filters the LOGGING setting attaches to Django's loggers."""

import logging


class ForbiddenWithoutTraceback(logging.Filter):
    """Keep django.request's one warning line for a 403 and drop the traceback it attaches.

    A PermissionDenied is the access check answering as designed (a reviewer opening the runs
    page, an outsider with no role), not a fault: the path and status say everything, and a
    traceback per refusal buries the real errors in the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
