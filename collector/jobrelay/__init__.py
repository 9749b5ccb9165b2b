"""The job roll-up between processes: where each of its messages goes (``routes``: a job's owner
by rendezvous of its key over the fleet's collectors and a collector's workers; a node's home),
how they are sent without holding the ingest path (``messenger``), and the gRPC service that
takes them in, on a worker or collector (``service``) and on a front, which hands each to its
worker (``front``)."""
