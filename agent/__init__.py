"""The per-node agent: sampling, delivery, diag, the sample and top views."""
