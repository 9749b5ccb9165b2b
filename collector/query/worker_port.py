"""A worker's own port takes agents; its queries are its front's alone.

Behind a front (``serve --workers N``) each worker holds a share of the nodes: its answer is part
of the fleet's, and an operator who asks it directly would see that part as if it were the whole.
So a worker answers the Query service only on its unix socket, where the front asks it (the
socket lies in the front's private runtime directory); a query on its agent port is refused with
``FAILED_PRECONDITION``, one line naming the front, and the front's port in the trailer
``nodeagent-front-port`` so a client can say where to ask on the host it dialled. Agents' ingest
on that port is untouched.
"""

from __future__ import annotations

from typing import Any

import grpc

# Trailing metadata of the refusal: the front's port (absent when its --listen asked for port 0).
FRONT_PORT_TRAILER = "nodeagent-front-port"
# How the refusal's detail begins: a client tells it apart from other FAILED_PRECONDITIONs by it.
REFUSAL_PREFIX = "this port is a worker's"


def refusal_detail(worker_index: int, front_listen: str) -> str:
    """The refusal's one line, as the worker says it (a front on an ephemeral port: by its flag)."""
    front = "serve's --listen" if front_listen.endswith(":0") else front_listen
    return f"{REFUSAL_PREFIX} (worker {worker_index} of a collector: agents only); ask its front at {front}"


async def refuse_unless_front(
    context: grpc.aio.ServicerContext[Any, Any], worker_index: int | None, front_listen: str | None
) -> None:
    """Abort a query on a worker unless it came on the front's unix socket; a collector that
    is no worker (``worker_index`` None) answers everyone its policy allows."""
    if worker_index is None or front_listen is None or context.peer().startswith("unix:"):
        return
    port = front_listen.rpartition(":")[2]
    trailer = ((FRONT_PORT_TRAILER, port),) if port.isdigit() and int(port) else ()
    await context.abort(
        grpc.StatusCode.FAILED_PRECONDITION, refusal_detail(worker_index, front_listen), trailing_metadata=trailer
    )


def is_refusal(line: str) -> bool:
    """``line`` (a status's ``CODE: detail``, as ``fleet/fanout.py`` gives it) is this refusal."""
    return line.startswith(f"{grpc.StatusCode.FAILED_PRECONDITION.name}: {REFUSAL_PREFIX}")


def front_target(dialled: str, err: grpc.aio.AioRpcError) -> str | None:
    """The front to ask instead of the worker at ``dialled`` (the host dialled, the front's port);
    None when ``err`` is no worker's refusal or the worker did not know its front's port."""
    if err.code() != grpc.StatusCode.FAILED_PRECONDITION or not str(err.details() or "").startswith(REFUSAL_PREFIX):
        return None
    ports = [str(value) for key, value in err.trailing_metadata() or () if key == FRONT_PORT_TRAILER]
    if not ports:
        return None
    return f"{dialled.rpartition(':')[0]}:{ports[0]}"
