"""A call answered with a gRPC status and one line instead of its answer: raised where the
refusal is decided (a query's bounds, a ledger asked for more rows than a message holds), turned
into the status where the call is served."""

from __future__ import annotations

import grpc


class QueryRefusedError(Exception):
    """A query answered with ``code`` and a one-line ``detail`` instead of rows."""

    def __init__(self, code: grpc.StatusCode, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
