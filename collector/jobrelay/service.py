"""The ``JobRelay`` gRPC service of a collector or a worker: the job roll-up's messages from the
other workers and collectors, handed to this process's stages (``JobMessenger.receive_*``).

Operators only, as the Query service (``authorize_operator``): a worker is called on its private
unix socket, a collector with ``[fleet]``'s operator credentials. Bad messages are dropped and
counted (``nodeagent_collector_job_messages_total{outcome="bad"}``), the rest judged.
"""

from __future__ import annotations

from typing import Any

import grpc

from nodeagent.collector.jobrelay.messenger import JobMessenger
from nodeagent.collector.jobs.wire import node_messages_from_pb, waits_from_pb
from nodeagent.collector.query.bounds import authorize_operator
from nodeagent.core.transport.security import AccessPolicy
from nodeagent.v1 import jobrelay_pb2 as jr
from nodeagent.v1 import jobrelay_pb2_grpc as jr_grpc

Context = grpc.aio.ServicerContext[Any, Any]


class JobRelayService(jr_grpc.JobRelayServicer):
    def __init__(self, messenger: JobMessenger, policy: AccessPolicy) -> None:
        self.messenger = messenger
        self.policy = policy

    async def NodeMessages(self, request: jr.JobNodeMessages, context: Context) -> jr.JobRelayAck:
        await authorize_operator(self.policy, context)
        self.messenger.receive_steps(*node_messages_from_pb(request))
        return jr.JobRelayAck()

    async def Waits(self, request: jr.JobWaitMessages, context: Context) -> jr.JobRelayAck:
        await authorize_operator(self.policy, context)
        self.messenger.receive_waits(*waits_from_pb(request))
        return jr.JobRelayAck()
