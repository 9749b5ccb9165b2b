"""Everything NVML, and what rides on it; the sampler reaches it through the registered `gpu`
source (``agent/sources/gpu.py``).

Only the ``nvml_*`` modules touch NVML (the only `import pynvml`s,
tests/agent/gpu/test_gpu_nvml_surface.py), one per role: ``nvml_library`` (NVML's lifetime, the
versioned calls, every call counted and watched), ``nvml_handle`` (one GPU's handle and how an
error on it is taken), ``nvml_topology`` (what a scan asks), ``nvml_readings`` (what a tick reads,
batched field values among it), ``nvml_sampling`` (GPM, and the power read between ticks),
``nvml_events`` (XID and ECC event sets); ``nvml_gpu`` puts them on one `Gpu`, ``nvml_types``
holds the records they return.

Around them: ``fields`` (field ids and where each lands in a report), ``events`` (the event
thread), ``processes`` (who runs on a GPU), ``job_identity`` (a process's multi-node job from its
launcher's environment and cgroup), ``job_samples`` (the report's `JobSample`s), ``describe``
(what the hello says of a GPU), ``view`` (GPU rows for people), ``deadlines`` (each GPU read on its
own thread within `[gpu_deadlines]`: an overrunning GPU is `unresponsive`), ``gpu_state`` (what
the source keeps per GPU between ticks, and a GPU opened at a scan), ``tick_sample`` (one GPU's
readings of a tick into its sample). One module each
beside the tick: ``fabric`` (the NVLink fabric, on the slow schedule), ``mig`` (MIG instances),
``process_share`` (each process's share of a shared GPU), ``xid_counts``, ``suspect_fields``
(readings the rest of the GPU contradicts), ``power_samples`` (the draw read every 0.1 s between
ticks on GPUs without GPM, where their regime makes such readings tell), ``power_sampler`` (the
one thread that reads them, every GPU in turn), ``power_regime`` (which reading tells each GPU's
computing share), ``round_readings`` (what a tick reads in turn, one a tick, carrying the others),
``slow_readings`` (what a tick reports but reads every 30 s), and, where configured,
``dcgm_exporter`` (a local dcgm-exporter's profiling scraped after each tick, read by
``dcgm_page``)."""
