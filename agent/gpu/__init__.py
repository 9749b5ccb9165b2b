"""Everything NVML: the one module that calls it (``nvml``), what its numbers mean (``fields``), the event
thread, the process table and each process's multi-node job (``processes``, ``job_identity``), the
node's jobs in the report (``job_samples``), the GPU view, and the registered ``gpu`` source
(``source``), the entry that the sampler reaches it through. Beside NVML, where configured: DCGM's
profiling from the node's dcgm-exporter (``dcgm_exporter``, ``dcgm_page``)."""
