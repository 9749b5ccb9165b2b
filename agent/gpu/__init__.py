"""Everything NVML: the one module that calls it (``nvml``), what its numbers mean (``fields``), the event
thread, the process table, the GPU view, and the registered ``gpu`` source (``source``), the entry
that the sampler reaches it through."""
