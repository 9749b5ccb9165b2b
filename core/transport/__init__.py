"""How the programs reach others: ``channel`` (the client: targets, TLS, token, keepalive),
``security`` (the server: loopback by default, TLS and mTLS material, the bearer token),
``rendezvous`` (rendezvous hashing by node id: the agent's order of its collectors and a
collector's worker for a node), ``backoff`` (the one retry backoff, with jitter), ``refused``
(`QueryRefusedError`: a call answered with a status and one line), ``diagnosis`` (why a
collector cannot be reached, in one line)."""
