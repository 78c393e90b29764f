from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """`{"count", "next", "previous", "results"}`; limit defaults to 50, capped at 200."""

    default_limit = 50
    max_limit = 200
