import re

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_OFFSET = 2**31 - 1  # far past any real page; keeps the SQL OFFSET inside every database's integer range
_DIGITS = re.compile(r"[0-9]+")


class Pagination(LimitOffsetPagination):
    """`{"count", "next", "previous", "results"}`; limit defaults to 50, capped at 200.

    A `limit` or `offset` that is not a whole number in range is a 400 naming it (DRF would quietly use the default).
    """

    default_limit = 50
    max_limit = 200

    def get_limit(self, request) -> int:
        raw = request.query_params.get(self.limit_query_param)
        if raw is None:
            return self.default_limit
        return min(_whole_number(self.limit_query_param, raw, minimum=1), self.max_limit)

    def get_offset(self, request) -> int:
        raw = request.query_params.get(self.offset_query_param)
        if raw is None:
            return 0
        offset = _whole_number(self.offset_query_param, raw, minimum=0)
        if offset > MAX_OFFSET:
            raise ValidationError({self.offset_query_param: [f"Ensure this value is at most {MAX_OFFSET}."]})
        return offset

    def get_schema_operation_parameters(self, view) -> list[dict]:
        limit, offset = super().get_schema_operation_parameters(view)
        limit["schema"] |= {"minimum": 1, "description": f"Above {self.max_limit} counts as {self.max_limit}."}
        offset["schema"] |= {"minimum": 0, "maximum": MAX_OFFSET}
        return [limit, offset]


def _whole_number(name: str, raw: str, *, minimum: int) -> int:
    """`raw` as an int >= minimum, else a 400 naming the parameter."""
    error = ValidationError({name: [f"Expected a whole number of at least {minimum}."]})
    if not _DIGITS.fullmatch(raw):
        raise error
    digits = raw.lstrip("0") or "0"
    value = int(digits) if len(digits) <= 12 else 10**12  # only "very large" matters (int() refuses 4300+ digits)
    if value < minimum:
        raise error
    return value
