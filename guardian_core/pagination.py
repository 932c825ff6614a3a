"""The API's one pagination: limit/offset with a bounded page and a checked offset.

Its own module because DRF imports the pagination class while it builds its generic views;
a module that imports those views back (guardian_core/api.py) cannot hold it.
"""

from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

MAX_LIMIT = 200
# Far beyond any table here, far below PostgreSQL's bigint (an OFFSET past it is a 500).
MAX_OFFSET = 10**12


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """LimitOffsetPagination whose limit is 1..MAX_LIMIT and offset 0..MAX_OFFSET.

    DRF's own silently falls back to the default page for a limit it cannot read and passes an
    offset of any size to the database; here a bad value is a 400 naming the parameter.
    """

    max_limit = MAX_LIMIT

    def get_limit(self, request: Request) -> int:
        raw = request.query_params.get(self.limit_query_param)
        if raw is None:
            return self.default_limit
        return _bounded(raw, self.limit_query_param, low=1, high=self.max_limit)

    def get_offset(self, request: Request) -> int:
        raw = request.query_params.get(self.offset_query_param)
        if raw is None:
            return 0
        return _bounded(raw, self.offset_query_param, low=0, high=MAX_OFFSET)

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters


def _bounded(raw: str, name: str, *, low: int, high: int) -> int:
    text = raw.strip()
    # Digits and length first: int() of a 100 000-digit string is itself refused by Python.
    digits = text.isascii() and text.isdecimal() and len(text) <= 15
    if not digits or not low <= int(text) <= high:
        message = _("must be a whole number from %(low)s to %(high)s") % {"low": low, "high": high}
        raise ValidationError({name: [message]})
    return int(text)
