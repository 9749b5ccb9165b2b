from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeReport(_message.Message):
    __slots__ = ("node_id", "epoch", "seq", "time_unix_seconds", "info", "collectors", "nics", "rdma_ports", "disks", "host", "gpus", "events", "agent", "jobs")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    COLLECTORS_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    RDMA_PORTS_FIELD_NUMBER: _ClassVar[int]
    DISKS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    epoch: int
    seq: int
    time_unix_seconds: float
    info: NodeInfo
    collectors: _containers.RepeatedCompositeFieldContainer[CollectorStatus]
    nics: _containers.RepeatedCompositeFieldContainer[NicSample]
    rdma_ports: _containers.RepeatedCompositeFieldContainer[RdmaPortSample]
    disks: _containers.RepeatedCompositeFieldContainer[DiskSample]
    host: HostSample
    gpus: _containers.RepeatedCompositeFieldContainer[GpuSample]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    agent: AgentStatus
    jobs: _containers.RepeatedCompositeFieldContainer[JobSample]
    def __init__(self, node_id: _Optional[str] = ..., epoch: _Optional[int] = ..., seq: _Optional[int] = ..., time_unix_seconds: _Optional[float] = ..., info: _Optional[_Union[NodeInfo, _Mapping]] = ..., collectors: _Optional[_Iterable[_Union[CollectorStatus, _Mapping]]] = ..., nics: _Optional[_Iterable[_Union[NicSample, _Mapping]]] = ..., rdma_ports: _Optional[_Iterable[_Union[RdmaPortSample, _Mapping]]] = ..., disks: _Optional[_Iterable[_Union[DiskSample, _Mapping]]] = ..., host: _Optional[_Union[HostSample, _Mapping]] = ..., gpus: _Optional[_Iterable[_Union[GpuSample, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., agent: _Optional[_Union[AgentStatus, _Mapping]] = ..., jobs: _Optional[_Iterable[_Union[JobSample, _Mapping]]] = ...) -> None: ...

class JobSample(_message.Message):
    __slots__ = ("job", "source", "world_size", "ranks", "node_rank", "gpus", "cgroup", "cpu_pressure", "io_pressure")
    JOB_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CGROUP_FIELD_NUMBER: _ClassVar[int]
    CPU_PRESSURE_FIELD_NUMBER: _ClassVar[int]
    IO_PRESSURE_FIELD_NUMBER: _ClassVar[int]
    job: str
    source: str
    world_size: int
    ranks: _containers.RepeatedScalarFieldContainer[int]
    node_rank: int
    gpus: _containers.RepeatedScalarFieldContainer[int]
    cgroup: str
    cpu_pressure: Pressure
    io_pressure: Pressure
    def __init__(self, job: _Optional[str] = ..., source: _Optional[str] = ..., world_size: _Optional[int] = ..., ranks: _Optional[_Iterable[int]] = ..., node_rank: _Optional[int] = ..., gpus: _Optional[_Iterable[int]] = ..., cgroup: _Optional[str] = ..., cpu_pressure: _Optional[_Union[Pressure, _Mapping]] = ..., io_pressure: _Optional[_Union[Pressure, _Mapping]] = ...) -> None: ...

class AgentStatus(_message.Message):
    __slots__ = ("spool_dropped_reports_total", "spool_reports", "spool_bytes")
    SPOOL_DROPPED_REPORTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SPOOL_REPORTS_FIELD_NUMBER: _ClassVar[int]
    SPOOL_BYTES_FIELD_NUMBER: _ClassVar[int]
    spool_dropped_reports_total: int
    spool_reports: int
    spool_bytes: int
    def __init__(self, spool_dropped_reports_total: _Optional[int] = ..., spool_reports: _Optional[int] = ..., spool_bytes: _Optional[int] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "hostname", "agent_version", "kernel_release", "cpu_count", "memory_total_bytes", "nics", "rdma_ports", "disks", "gpu", "routing_key")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    KERNEL_RELEASE_FIELD_NUMBER: _ClassVar[int]
    CPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    NICS_FIELD_NUMBER: _ClassVar[int]
    RDMA_PORTS_FIELD_NUMBER: _ClassVar[int]
    DISKS_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    hostname: str
    agent_version: str
    kernel_release: str
    cpu_count: int
    memory_total_bytes: int
    nics: _containers.RepeatedCompositeFieldContainer[NicInfo]
    rdma_ports: _containers.RepeatedCompositeFieldContainer[RdmaPortInfo]
    disks: _containers.RepeatedCompositeFieldContainer[DiskInfo]
    gpu: GpuTopology
    routing_key: str
    def __init__(self, node_id: _Optional[str] = ..., hostname: _Optional[str] = ..., agent_version: _Optional[str] = ..., kernel_release: _Optional[str] = ..., cpu_count: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., nics: _Optional[_Iterable[_Union[NicInfo, _Mapping]]] = ..., rdma_ports: _Optional[_Iterable[_Union[RdmaPortInfo, _Mapping]]] = ..., disks: _Optional[_Iterable[_Union[DiskInfo, _Mapping]]] = ..., gpu: _Optional[_Union[GpuTopology, _Mapping]] = ..., routing_key: _Optional[str] = ...) -> None: ...

class NicInfo(_message.Message):
    __slots__ = ("name", "speed_bytes_per_second", "speed_source", "virtual", "kind", "bond_master", "bond_members", "mtu", "address")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEED_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SPEED_SOURCE_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    BOND_MASTER_FIELD_NUMBER: _ClassVar[int]
    BOND_MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MTU_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    name: str
    speed_bytes_per_second: float
    speed_source: str
    virtual: bool
    kind: str
    bond_master: str
    bond_members: _containers.RepeatedScalarFieldContainer[str]
    mtu: int
    address: str
    def __init__(self, name: _Optional[str] = ..., speed_bytes_per_second: _Optional[float] = ..., speed_source: _Optional[str] = ..., virtual: _Optional[bool] = ..., kind: _Optional[str] = ..., bond_master: _Optional[str] = ..., bond_members: _Optional[_Iterable[str]] = ..., mtu: _Optional[int] = ..., address: _Optional[str] = ...) -> None: ...

class RdmaPortInfo(_message.Message):
    __slots__ = ("device", "port", "rate_bytes_per_second", "rate_text", "link_layer", "hca_type", "firmware_version", "board_id")
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    RATE_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    RATE_TEXT_FIELD_NUMBER: _ClassVar[int]
    LINK_LAYER_FIELD_NUMBER: _ClassVar[int]
    HCA_TYPE_FIELD_NUMBER: _ClassVar[int]
    FIRMWARE_VERSION_FIELD_NUMBER: _ClassVar[int]
    BOARD_ID_FIELD_NUMBER: _ClassVar[int]
    device: str
    port: int
    rate_bytes_per_second: float
    rate_text: str
    link_layer: str
    hca_type: str
    firmware_version: str
    board_id: str
    def __init__(self, device: _Optional[str] = ..., port: _Optional[int] = ..., rate_bytes_per_second: _Optional[float] = ..., rate_text: _Optional[str] = ..., link_layer: _Optional[str] = ..., hca_type: _Optional[str] = ..., firmware_version: _Optional[str] = ..., board_id: _Optional[str] = ...) -> None: ...

class DiskInfo(_message.Message):
    __slots__ = ("name", "rotational", "size_bytes", "transport", "nvme_controller", "model", "mountpoints")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROTATIONAL_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    NVME_CONTROLLER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MOUNTPOINTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    rotational: bool
    size_bytes: int
    transport: str
    nvme_controller: str
    model: str
    mountpoints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., rotational: _Optional[bool] = ..., size_bytes: _Optional[int] = ..., transport: _Optional[str] = ..., nvme_controller: _Optional[str] = ..., model: _Optional[str] = ..., mountpoints: _Optional[_Iterable[str]] = ...) -> None: ...

class CollectorStatus(_message.Message):
    __slots__ = ("name", "success", "duration_seconds", "error")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    name: str
    success: bool
    duration_seconds: float
    error: str
    def __init__(self, name: _Optional[str] = ..., success: _Optional[bool] = ..., duration_seconds: _Optional[float] = ..., error: _Optional[str] = ...) -> None: ...

class NicSample(_message.Message):
    __slots__ = ("name", "rx_bytes_total", "tx_bytes_total", "rx_packets_total", "tx_packets_total", "rx_errors_total", "tx_errors_total", "rx_dropped_total", "tx_dropped_total", "operstate", "carrier", "carrier_changes_total", "speed_bytes_per_second", "mtu")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RX_PACKETS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TX_PACKETS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RX_ERRORS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TX_ERRORS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RX_DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TX_DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    OPERSTATE_FIELD_NUMBER: _ClassVar[int]
    CARRIER_FIELD_NUMBER: _ClassVar[int]
    CARRIER_CHANGES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SPEED_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    MTU_FIELD_NUMBER: _ClassVar[int]
    name: str
    rx_bytes_total: int
    tx_bytes_total: int
    rx_packets_total: int
    tx_packets_total: int
    rx_errors_total: int
    tx_errors_total: int
    rx_dropped_total: int
    tx_dropped_total: int
    operstate: str
    carrier: bool
    carrier_changes_total: int
    speed_bytes_per_second: float
    mtu: int
    def __init__(self, name: _Optional[str] = ..., rx_bytes_total: _Optional[int] = ..., tx_bytes_total: _Optional[int] = ..., rx_packets_total: _Optional[int] = ..., tx_packets_total: _Optional[int] = ..., rx_errors_total: _Optional[int] = ..., tx_errors_total: _Optional[int] = ..., rx_dropped_total: _Optional[int] = ..., tx_dropped_total: _Optional[int] = ..., operstate: _Optional[str] = ..., carrier: _Optional[bool] = ..., carrier_changes_total: _Optional[int] = ..., speed_bytes_per_second: _Optional[float] = ..., mtu: _Optional[int] = ...) -> None: ...

class RdmaPortSample(_message.Message):
    __slots__ = ("device", "port", "state", "state_id", "phys_state", "phys_state_id", "rate_bytes_per_second", "rx_bytes_total", "tx_bytes_total", "rx_packets_total", "tx_packets_total", "counters", "hw_counters", "saturated_counters")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class HwCountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_ID_FIELD_NUMBER: _ClassVar[int]
    PHYS_STATE_FIELD_NUMBER: _ClassVar[int]
    PHYS_STATE_ID_FIELD_NUMBER: _ClassVar[int]
    RATE_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    RX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RX_PACKETS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TX_PACKETS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    HW_COUNTERS_FIELD_NUMBER: _ClassVar[int]
    SATURATED_COUNTERS_FIELD_NUMBER: _ClassVar[int]
    device: str
    port: int
    state: str
    state_id: int
    phys_state: str
    phys_state_id: int
    rate_bytes_per_second: float
    rx_bytes_total: int
    tx_bytes_total: int
    rx_packets_total: int
    tx_packets_total: int
    counters: _containers.ScalarMap[str, int]
    hw_counters: _containers.ScalarMap[str, int]
    saturated_counters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, device: _Optional[str] = ..., port: _Optional[int] = ..., state: _Optional[str] = ..., state_id: _Optional[int] = ..., phys_state: _Optional[str] = ..., phys_state_id: _Optional[int] = ..., rate_bytes_per_second: _Optional[float] = ..., rx_bytes_total: _Optional[int] = ..., tx_bytes_total: _Optional[int] = ..., rx_packets_total: _Optional[int] = ..., tx_packets_total: _Optional[int] = ..., counters: _Optional[_Mapping[str, int]] = ..., hw_counters: _Optional[_Mapping[str, int]] = ..., saturated_counters: _Optional[_Iterable[str]] = ...) -> None: ...

class DiskSample(_message.Message):
    __slots__ = ("name", "reads_completed_total", "reads_merged_total", "read_bytes_total", "read_time_milliseconds_total", "writes_completed_total", "writes_merged_total", "written_bytes_total", "write_time_milliseconds_total", "io_in_progress", "io_time_milliseconds_total", "io_weighted_time_milliseconds_total", "discards_completed_total", "discards_merged_total", "discarded_bytes_total", "discard_time_milliseconds_total", "flushes_completed_total", "flush_time_milliseconds_total")
    NAME_FIELD_NUMBER: _ClassVar[int]
    READS_COMPLETED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    READS_MERGED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    READ_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    READ_TIME_MILLISECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    WRITES_COMPLETED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    WRITES_MERGED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    WRITE_TIME_MILLISECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    IO_IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    IO_TIME_MILLISECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    IO_WEIGHTED_TIME_MILLISECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DISCARDS_COMPLETED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DISCARDS_MERGED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DISCARDED_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DISCARD_TIME_MILLISECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FLUSHES_COMPLETED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FLUSH_TIME_MILLISECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    reads_completed_total: int
    reads_merged_total: int
    read_bytes_total: int
    read_time_milliseconds_total: int
    writes_completed_total: int
    writes_merged_total: int
    written_bytes_total: int
    write_time_milliseconds_total: int
    io_in_progress: int
    io_time_milliseconds_total: int
    io_weighted_time_milliseconds_total: int
    discards_completed_total: int
    discards_merged_total: int
    discarded_bytes_total: int
    discard_time_milliseconds_total: int
    flushes_completed_total: int
    flush_time_milliseconds_total: int
    def __init__(self, name: _Optional[str] = ..., reads_completed_total: _Optional[int] = ..., reads_merged_total: _Optional[int] = ..., read_bytes_total: _Optional[int] = ..., read_time_milliseconds_total: _Optional[int] = ..., writes_completed_total: _Optional[int] = ..., writes_merged_total: _Optional[int] = ..., written_bytes_total: _Optional[int] = ..., write_time_milliseconds_total: _Optional[int] = ..., io_in_progress: _Optional[int] = ..., io_time_milliseconds_total: _Optional[int] = ..., io_weighted_time_milliseconds_total: _Optional[int] = ..., discards_completed_total: _Optional[int] = ..., discards_merged_total: _Optional[int] = ..., discarded_bytes_total: _Optional[int] = ..., discard_time_milliseconds_total: _Optional[int] = ..., flushes_completed_total: _Optional[int] = ..., flush_time_milliseconds_total: _Optional[int] = ...) -> None: ...

class CpuTimes(_message.Message):
    __slots__ = ("cpu", "user_seconds_total", "nice_seconds_total", "system_seconds_total", "idle_seconds_total", "iowait_seconds_total", "irq_seconds_total", "softirq_seconds_total", "steal_seconds_total")
    CPU_FIELD_NUMBER: _ClassVar[int]
    USER_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NICE_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    IDLE_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    IOWAIT_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    IRQ_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SOFTIRQ_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STEAL_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    cpu: str
    user_seconds_total: float
    nice_seconds_total: float
    system_seconds_total: float
    idle_seconds_total: float
    iowait_seconds_total: float
    irq_seconds_total: float
    softirq_seconds_total: float
    steal_seconds_total: float
    def __init__(self, cpu: _Optional[str] = ..., user_seconds_total: _Optional[float] = ..., nice_seconds_total: _Optional[float] = ..., system_seconds_total: _Optional[float] = ..., idle_seconds_total: _Optional[float] = ..., iowait_seconds_total: _Optional[float] = ..., irq_seconds_total: _Optional[float] = ..., softirq_seconds_total: _Optional[float] = ..., steal_seconds_total: _Optional[float] = ...) -> None: ...

class Pressure(_message.Message):
    __slots__ = ("some_avg10_ratio", "some_avg60_ratio", "some_avg300_ratio", "some_total_microseconds", "full_avg10_ratio", "full_avg60_ratio", "full_avg300_ratio", "full_total_microseconds")
    SOME_AVG10_RATIO_FIELD_NUMBER: _ClassVar[int]
    SOME_AVG60_RATIO_FIELD_NUMBER: _ClassVar[int]
    SOME_AVG300_RATIO_FIELD_NUMBER: _ClassVar[int]
    SOME_TOTAL_MICROSECONDS_FIELD_NUMBER: _ClassVar[int]
    FULL_AVG10_RATIO_FIELD_NUMBER: _ClassVar[int]
    FULL_AVG60_RATIO_FIELD_NUMBER: _ClassVar[int]
    FULL_AVG300_RATIO_FIELD_NUMBER: _ClassVar[int]
    FULL_TOTAL_MICROSECONDS_FIELD_NUMBER: _ClassVar[int]
    some_avg10_ratio: float
    some_avg60_ratio: float
    some_avg300_ratio: float
    some_total_microseconds: int
    full_avg10_ratio: float
    full_avg60_ratio: float
    full_avg300_ratio: float
    full_total_microseconds: int
    def __init__(self, some_avg10_ratio: _Optional[float] = ..., some_avg60_ratio: _Optional[float] = ..., some_avg300_ratio: _Optional[float] = ..., some_total_microseconds: _Optional[int] = ..., full_avg10_ratio: _Optional[float] = ..., full_avg60_ratio: _Optional[float] = ..., full_avg300_ratio: _Optional[float] = ..., full_total_microseconds: _Optional[int] = ...) -> None: ...

class HostSample(_message.Message):
    __slots__ = ("cpu_total", "cpus", "context_switches_total", "procs_running", "procs_blocked", "load1", "load5", "load15", "memory_total_bytes", "memory_free_bytes", "memory_available_bytes", "memory_buffers_bytes", "memory_cached_bytes", "memory_dirty_bytes", "memory_writeback_bytes", "pressure_cpu", "pressure_io", "pressure_memory", "tcp_out_segments_total", "tcp_retransmitted_segments_total")
    CPU_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_SWITCHES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PROCS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    PROCS_BLOCKED_FIELD_NUMBER: _ClassVar[int]
    LOAD1_FIELD_NUMBER: _ClassVar[int]
    LOAD5_FIELD_NUMBER: _ClassVar[int]
    LOAD15_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BUFFERS_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CACHED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_DIRTY_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_WRITEBACK_BYTES_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_CPU_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_IO_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_MEMORY_FIELD_NUMBER: _ClassVar[int]
    TCP_OUT_SEGMENTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TCP_RETRANSMITTED_SEGMENTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    cpu_total: CpuTimes
    cpus: _containers.RepeatedCompositeFieldContainer[CpuTimes]
    context_switches_total: int
    procs_running: int
    procs_blocked: int
    load1: float
    load5: float
    load15: float
    memory_total_bytes: int
    memory_free_bytes: int
    memory_available_bytes: int
    memory_buffers_bytes: int
    memory_cached_bytes: int
    memory_dirty_bytes: int
    memory_writeback_bytes: int
    pressure_cpu: Pressure
    pressure_io: Pressure
    pressure_memory: Pressure
    tcp_out_segments_total: int
    tcp_retransmitted_segments_total: int
    def __init__(self, cpu_total: _Optional[_Union[CpuTimes, _Mapping]] = ..., cpus: _Optional[_Iterable[_Union[CpuTimes, _Mapping]]] = ..., context_switches_total: _Optional[int] = ..., procs_running: _Optional[int] = ..., procs_blocked: _Optional[int] = ..., load1: _Optional[float] = ..., load5: _Optional[float] = ..., load15: _Optional[float] = ..., memory_total_bytes: _Optional[int] = ..., memory_free_bytes: _Optional[int] = ..., memory_available_bytes: _Optional[int] = ..., memory_buffers_bytes: _Optional[int] = ..., memory_cached_bytes: _Optional[int] = ..., memory_dirty_bytes: _Optional[int] = ..., memory_writeback_bytes: _Optional[int] = ..., pressure_cpu: _Optional[_Union[Pressure, _Mapping]] = ..., pressure_io: _Optional[_Union[Pressure, _Mapping]] = ..., pressure_memory: _Optional[_Union[Pressure, _Mapping]] = ..., tcp_out_segments_total: _Optional[int] = ..., tcp_retransmitted_segments_total: _Optional[int] = ...) -> None: ...

class GpuTopology(_message.Message):
    __slots__ = ("unavailable_reason", "driver_version", "nvml_version", "cuda_driver_version", "gpus")
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    NVML_VERSION_FIELD_NUMBER: _ClassVar[int]
    CUDA_DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    unavailable_reason: str
    driver_version: str
    nvml_version: str
    cuda_driver_version: int
    gpus: _containers.RepeatedCompositeFieldContainer[GpuInfo]
    def __init__(self, unavailable_reason: _Optional[str] = ..., driver_version: _Optional[str] = ..., nvml_version: _Optional[str] = ..., cuda_driver_version: _Optional[int] = ..., gpus: _Optional[_Iterable[_Union[GpuInfo, _Mapping]]] = ...) -> None: ...

class GpuInfo(_message.Message):
    __slots__ = ("index", "uuid", "name", "pci_bus_id", "memory_total_bytes", "nvlink_count", "nvlink_speed_bytes_per_second", "pcie_max_generation", "pcie_max_width", "gpm_supported", "serial", "architecture", "c2c_link_count", "c2c_link_speed_bytes_per_second", "mig_enabled", "mig_instances")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    NVLINK_COUNT_FIELD_NUMBER: _ClassVar[int]
    NVLINK_SPEED_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PCIE_MAX_GENERATION_FIELD_NUMBER: _ClassVar[int]
    PCIE_MAX_WIDTH_FIELD_NUMBER: _ClassVar[int]
    GPM_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    SERIAL_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    C2C_LINK_COUNT_FIELD_NUMBER: _ClassVar[int]
    C2C_LINK_SPEED_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    MIG_ENABLED_FIELD_NUMBER: _ClassVar[int]
    MIG_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_bytes: int
    nvlink_count: int
    nvlink_speed_bytes_per_second: float
    pcie_max_generation: int
    pcie_max_width: int
    gpm_supported: bool
    serial: str
    architecture: str
    c2c_link_count: int
    c2c_link_speed_bytes_per_second: float
    mig_enabled: bool
    mig_instances: _containers.RepeatedCompositeFieldContainer[MigInstanceInfo]
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ..., pci_bus_id: _Optional[str] = ..., memory_total_bytes: _Optional[int] = ..., nvlink_count: _Optional[int] = ..., nvlink_speed_bytes_per_second: _Optional[float] = ..., pcie_max_generation: _Optional[int] = ..., pcie_max_width: _Optional[int] = ..., gpm_supported: _Optional[bool] = ..., serial: _Optional[str] = ..., architecture: _Optional[str] = ..., c2c_link_count: _Optional[int] = ..., c2c_link_speed_bytes_per_second: _Optional[float] = ..., mig_enabled: _Optional[bool] = ..., mig_instances: _Optional[_Iterable[_Union[MigInstanceInfo, _Mapping]]] = ...) -> None: ...

class MigInstanceInfo(_message.Message):
    __slots__ = ("uuid", "gpu_instance_id", "compute_instance_id", "profile", "memory_total_bytes", "multiprocessor_count", "slice_count", "mig_index")
    UUID_FIELD_NUMBER: _ClassVar[int]
    GPU_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MULTIPROCESSOR_COUNT_FIELD_NUMBER: _ClassVar[int]
    SLICE_COUNT_FIELD_NUMBER: _ClassVar[int]
    MIG_INDEX_FIELD_NUMBER: _ClassVar[int]
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    memory_total_bytes: int
    multiprocessor_count: int
    slice_count: int
    mig_index: int
    def __init__(self, uuid: _Optional[str] = ..., gpu_instance_id: _Optional[int] = ..., compute_instance_id: _Optional[int] = ..., profile: _Optional[str] = ..., memory_total_bytes: _Optional[int] = ..., multiprocessor_count: _Optional[int] = ..., slice_count: _Optional[int] = ..., mig_index: _Optional[int] = ...) -> None: ...

class JobRef(_message.Message):
    __slots__ = ("slurm_job_id", "k8s_pod_uid", "container_id", "cgroup", "job_key", "world_size", "rank", "local_rank", "node_rank", "account", "k8s_namespace")
    SLURM_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    K8S_POD_UID_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    CGROUP_FIELD_NUMBER: _ClassVar[int]
    JOB_KEY_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    K8S_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    slurm_job_id: str
    k8s_pod_uid: str
    container_id: str
    cgroup: str
    job_key: str
    world_size: int
    rank: int
    local_rank: int
    node_rank: int
    account: str
    k8s_namespace: str
    def __init__(self, slurm_job_id: _Optional[str] = ..., k8s_pod_uid: _Optional[str] = ..., container_id: _Optional[str] = ..., cgroup: _Optional[str] = ..., job_key: _Optional[str] = ..., world_size: _Optional[int] = ..., rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., node_rank: _Optional[int] = ..., account: _Optional[str] = ..., k8s_namespace: _Optional[str] = ...) -> None: ...

class GpuProcess(_message.Message):
    __slots__ = ("pid", "used_memory_bytes", "name", "user", "job", "sm_utilization_ratio", "memory_utilization_ratio")
    PID_FIELD_NUMBER: _ClassVar[int]
    USED_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    SM_UTILIZATION_RATIO_FIELD_NUMBER: _ClassVar[int]
    MEMORY_UTILIZATION_RATIO_FIELD_NUMBER: _ClassVar[int]
    pid: int
    used_memory_bytes: int
    name: str
    user: str
    job: JobRef
    sm_utilization_ratio: float
    memory_utilization_ratio: float
    def __init__(self, pid: _Optional[int] = ..., used_memory_bytes: _Optional[int] = ..., name: _Optional[str] = ..., user: _Optional[str] = ..., job: _Optional[_Union[JobRef, _Mapping]] = ..., sm_utilization_ratio: _Optional[float] = ..., memory_utilization_ratio: _Optional[float] = ...) -> None: ...

class NvLinkSample(_message.Message):
    __slots__ = ("link", "active", "rx_bytes_total", "tx_bytes_total", "replay_errors_total", "recovery_errors_total", "crc_flit_errors_total", "crc_data_errors_total")
    LINK_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    RX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REPLAY_ERRORS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_ERRORS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CRC_FLIT_ERRORS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CRC_DATA_ERRORS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    link: int
    active: bool
    rx_bytes_total: int
    tx_bytes_total: int
    replay_errors_total: int
    recovery_errors_total: int
    crc_flit_errors_total: int
    crc_data_errors_total: int
    def __init__(self, link: _Optional[int] = ..., active: _Optional[bool] = ..., rx_bytes_total: _Optional[int] = ..., tx_bytes_total: _Optional[int] = ..., replay_errors_total: _Optional[int] = ..., recovery_errors_total: _Optional[int] = ..., crc_flit_errors_total: _Optional[int] = ..., crc_data_errors_total: _Optional[int] = ...) -> None: ...

class GpuSample(_message.Message):
    __slots__ = ("index", "uuid", "lost", "utilization_gpu_ratio", "utilization_memory_ratio", "memory_used_bytes", "memory_total_bytes", "processes", "sm_active_ratio", "sm_occupancy_ratio", "tensor_active_ratio", "gpm_pcie_rx_bytes_per_second", "gpm_pcie_tx_bytes_per_second", "gpm_nvlink_rx_bytes_per_second", "gpm_nvlink_tx_bytes_per_second", "pcie_rx_bytes_total", "pcie_tx_bytes_total", "pcie_rx_bytes_per_second", "pcie_tx_bytes_per_second", "pcie_link_generation", "pcie_link_width", "pcie_max_link_generation", "pcie_max_link_width", "pcie_replay_total", "nvlinks", "nvlink_rx_bytes_total", "nvlink_tx_bytes_total", "clock_event_reasons", "clock_event_reason_names", "temperature_celsius", "power_watts", "ecc_uncorrected_volatile_total", "ecc_uncorrected_aggregate_total", "remapped_rows_pending", "remapped_rows_failure", "sm_clock_mhz", "memory_free_bytes", "memory_reserved_bytes", "utilization_encoder_ratio", "utilization_decoder_ratio", "memory_temperature_celsius", "energy_millijoules_total", "memory_clock_mhz", "remapped_rows_correctable_total", "remapped_rows_uncorrectable_total", "graphics_active_ratio", "dram_active_ratio", "fabric", "mig_instances", "gpu_instance_id", "compute_instance_id", "mig_profile", "xid_errors_total", "suspect_fields", "unresponsive", "unresponsive_call", "unresponsive_seconds", "samples_taken_total", "samples_expected_total", "power_samples_watts", "computing_source", "computing_source_reason")
    class XidErrorsTotalEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_GPU_RATIO_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_MEMORY_RATIO_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    SM_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    SM_OCCUPANCY_RATIO_FIELD_NUMBER: _ClassVar[int]
    TENSOR_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    GPM_PCIE_RX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    GPM_PCIE_TX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    GPM_NVLINK_RX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    GPM_NVLINK_TX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PCIE_RX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PCIE_TX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PCIE_RX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PCIE_TX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_GENERATION_FIELD_NUMBER: _ClassVar[int]
    PCIE_LINK_WIDTH_FIELD_NUMBER: _ClassVar[int]
    PCIE_MAX_LINK_GENERATION_FIELD_NUMBER: _ClassVar[int]
    PCIE_MAX_LINK_WIDTH_FIELD_NUMBER: _ClassVar[int]
    PCIE_REPLAY_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NVLINKS_FIELD_NUMBER: _ClassVar[int]
    NVLINK_RX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NVLINK_TX_BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CLOCK_EVENT_REASONS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_EVENT_REASON_NAMES_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_CELSIUS_FIELD_NUMBER: _ClassVar[int]
    POWER_WATTS_FIELD_NUMBER: _ClassVar[int]
    ECC_UNCORRECTED_VOLATILE_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ECC_UNCORRECTED_AGGREGATE_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_PENDING_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_FAILURE_FIELD_NUMBER: _ClassVar[int]
    SM_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_RESERVED_BYTES_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_ENCODER_RATIO_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_DECODER_RATIO_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TEMPERATURE_CELSIUS_FIELD_NUMBER: _ClassVar[int]
    ENERGY_MILLIJOULES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_CORRECTABLE_TOTAL_FIELD_NUMBER: _ClassVar[int]
    REMAPPED_ROWS_UNCORRECTABLE_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GRAPHICS_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    DRAM_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    FABRIC_FIELD_NUMBER: _ClassVar[int]
    MIG_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    GPU_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    MIG_PROFILE_FIELD_NUMBER: _ClassVar[int]
    XID_ERRORS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SUSPECT_FIELDS_FIELD_NUMBER: _ClassVar[int]
    UNRESPONSIVE_FIELD_NUMBER: _ClassVar[int]
    UNRESPONSIVE_CALL_FIELD_NUMBER: _ClassVar[int]
    UNRESPONSIVE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_TAKEN_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_EXPECTED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    POWER_SAMPLES_WATTS_FIELD_NUMBER: _ClassVar[int]
    COMPUTING_SOURCE_FIELD_NUMBER: _ClassVar[int]
    COMPUTING_SOURCE_REASON_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    lost: bool
    utilization_gpu_ratio: float
    utilization_memory_ratio: float
    memory_used_bytes: int
    memory_total_bytes: int
    processes: _containers.RepeatedCompositeFieldContainer[GpuProcess]
    sm_active_ratio: float
    sm_occupancy_ratio: float
    tensor_active_ratio: float
    gpm_pcie_rx_bytes_per_second: float
    gpm_pcie_tx_bytes_per_second: float
    gpm_nvlink_rx_bytes_per_second: float
    gpm_nvlink_tx_bytes_per_second: float
    pcie_rx_bytes_total: int
    pcie_tx_bytes_total: int
    pcie_rx_bytes_per_second: float
    pcie_tx_bytes_per_second: float
    pcie_link_generation: int
    pcie_link_width: int
    pcie_max_link_generation: int
    pcie_max_link_width: int
    pcie_replay_total: int
    nvlinks: _containers.RepeatedCompositeFieldContainer[NvLinkSample]
    nvlink_rx_bytes_total: int
    nvlink_tx_bytes_total: int
    clock_event_reasons: int
    clock_event_reason_names: _containers.RepeatedScalarFieldContainer[str]
    temperature_celsius: float
    power_watts: float
    ecc_uncorrected_volatile_total: int
    ecc_uncorrected_aggregate_total: int
    remapped_rows_pending: bool
    remapped_rows_failure: bool
    sm_clock_mhz: int
    memory_free_bytes: int
    memory_reserved_bytes: int
    utilization_encoder_ratio: float
    utilization_decoder_ratio: float
    memory_temperature_celsius: float
    energy_millijoules_total: int
    memory_clock_mhz: int
    remapped_rows_correctable_total: int
    remapped_rows_uncorrectable_total: int
    graphics_active_ratio: float
    dram_active_ratio: float
    fabric: GpuFabric
    mig_instances: _containers.RepeatedCompositeFieldContainer[GpuSample]
    gpu_instance_id: int
    compute_instance_id: int
    mig_profile: str
    xid_errors_total: _containers.ScalarMap[str, int]
    suspect_fields: _containers.RepeatedScalarFieldContainer[str]
    unresponsive: bool
    unresponsive_call: str
    unresponsive_seconds: float
    samples_taken_total: int
    samples_expected_total: int
    power_samples_watts: _containers.RepeatedScalarFieldContainer[float]
    computing_source: str
    computing_source_reason: str
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., lost: _Optional[bool] = ..., utilization_gpu_ratio: _Optional[float] = ..., utilization_memory_ratio: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., processes: _Optional[_Iterable[_Union[GpuProcess, _Mapping]]] = ..., sm_active_ratio: _Optional[float] = ..., sm_occupancy_ratio: _Optional[float] = ..., tensor_active_ratio: _Optional[float] = ..., gpm_pcie_rx_bytes_per_second: _Optional[float] = ..., gpm_pcie_tx_bytes_per_second: _Optional[float] = ..., gpm_nvlink_rx_bytes_per_second: _Optional[float] = ..., gpm_nvlink_tx_bytes_per_second: _Optional[float] = ..., pcie_rx_bytes_total: _Optional[int] = ..., pcie_tx_bytes_total: _Optional[int] = ..., pcie_rx_bytes_per_second: _Optional[float] = ..., pcie_tx_bytes_per_second: _Optional[float] = ..., pcie_link_generation: _Optional[int] = ..., pcie_link_width: _Optional[int] = ..., pcie_max_link_generation: _Optional[int] = ..., pcie_max_link_width: _Optional[int] = ..., pcie_replay_total: _Optional[int] = ..., nvlinks: _Optional[_Iterable[_Union[NvLinkSample, _Mapping]]] = ..., nvlink_rx_bytes_total: _Optional[int] = ..., nvlink_tx_bytes_total: _Optional[int] = ..., clock_event_reasons: _Optional[int] = ..., clock_event_reason_names: _Optional[_Iterable[str]] = ..., temperature_celsius: _Optional[float] = ..., power_watts: _Optional[float] = ..., ecc_uncorrected_volatile_total: _Optional[int] = ..., ecc_uncorrected_aggregate_total: _Optional[int] = ..., remapped_rows_pending: _Optional[bool] = ..., remapped_rows_failure: _Optional[bool] = ..., sm_clock_mhz: _Optional[int] = ..., memory_free_bytes: _Optional[int] = ..., memory_reserved_bytes: _Optional[int] = ..., utilization_encoder_ratio: _Optional[float] = ..., utilization_decoder_ratio: _Optional[float] = ..., memory_temperature_celsius: _Optional[float] = ..., energy_millijoules_total: _Optional[int] = ..., memory_clock_mhz: _Optional[int] = ..., remapped_rows_correctable_total: _Optional[int] = ..., remapped_rows_uncorrectable_total: _Optional[int] = ..., graphics_active_ratio: _Optional[float] = ..., dram_active_ratio: _Optional[float] = ..., fabric: _Optional[_Union[GpuFabric, _Mapping]] = ..., mig_instances: _Optional[_Iterable[_Union[GpuSample, _Mapping]]] = ..., gpu_instance_id: _Optional[int] = ..., compute_instance_id: _Optional[int] = ..., mig_profile: _Optional[str] = ..., xid_errors_total: _Optional[_Mapping[str, int]] = ..., suspect_fields: _Optional[_Iterable[str]] = ..., unresponsive: _Optional[bool] = ..., unresponsive_call: _Optional[str] = ..., unresponsive_seconds: _Optional[float] = ..., samples_taken_total: _Optional[int] = ..., samples_expected_total: _Optional[int] = ..., power_samples_watts: _Optional[_Iterable[float]] = ..., computing_source: _Optional[str] = ..., computing_source_reason: _Optional[str] = ...) -> None: ...

class GpuFabric(_message.Message):
    __slots__ = ("state", "status", "cluster_uuid", "clique_id", "health_mask", "degraded_bandwidth", "route_recovery", "route_unhealthy", "access_timeout_recovery", "health_summary", "incorrect_configuration")
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_UUID_FIELD_NUMBER: _ClassVar[int]
    CLIQUE_ID_FIELD_NUMBER: _ClassVar[int]
    HEALTH_MASK_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_BANDWIDTH_FIELD_NUMBER: _ClassVar[int]
    ROUTE_RECOVERY_FIELD_NUMBER: _ClassVar[int]
    ROUTE_UNHEALTHY_FIELD_NUMBER: _ClassVar[int]
    ACCESS_TIMEOUT_RECOVERY_FIELD_NUMBER: _ClassVar[int]
    HEALTH_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    INCORRECT_CONFIGURATION_FIELD_NUMBER: _ClassVar[int]
    state: str
    status: int
    cluster_uuid: str
    clique_id: int
    health_mask: int
    degraded_bandwidth: bool
    route_recovery: bool
    route_unhealthy: bool
    access_timeout_recovery: bool
    health_summary: str
    incorrect_configuration: str
    def __init__(self, state: _Optional[str] = ..., status: _Optional[int] = ..., cluster_uuid: _Optional[str] = ..., clique_id: _Optional[int] = ..., health_mask: _Optional[int] = ..., degraded_bandwidth: _Optional[bool] = ..., route_recovery: _Optional[bool] = ..., route_unhealthy: _Optional[bool] = ..., access_timeout_recovery: _Optional[bool] = ..., health_summary: _Optional[str] = ..., incorrect_configuration: _Optional[str] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("time_unix_seconds", "kind", "severity", "subject", "message", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TIME_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    time_unix_seconds: float
    kind: str
    severity: str
    subject: str
    message: str
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, time_unix_seconds: _Optional[float] = ..., kind: _Optional[str] = ..., severity: _Optional[str] = ..., subject: _Optional[str] = ..., message: _Optional[str] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class AgentMessage(_message.Message):
    __slots__ = ("hello", "report", "goodbye")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    GOODBYE_FIELD_NUMBER: _ClassVar[int]
    hello: NodeInfo
    report: NodeReport
    goodbye: Goodbye
    def __init__(self, hello: _Optional[_Union[NodeInfo, _Mapping]] = ..., report: _Optional[_Union[NodeReport, _Mapping]] = ..., goodbye: _Optional[_Union[Goodbye, _Mapping]] = ...) -> None: ...

class Goodbye(_message.Message):
    __slots__ = ("reason", "routing_key", "kind")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[Goodbye.Kind]
        KIND_MOVING: _ClassVar[Goodbye.Kind]
        KIND_STOPPING: _ClassVar[Goodbye.Kind]
    KIND_UNSPECIFIED: Goodbye.Kind
    KIND_MOVING: Goodbye.Kind
    KIND_STOPPING: Goodbye.Kind
    REASON_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    reason: str
    routing_key: str
    kind: Goodbye.Kind
    def __init__(self, reason: _Optional[str] = ..., routing_key: _Optional[str] = ..., kind: _Optional[_Union[Goodbye.Kind, str]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("node_id", "epoch", "acked_seq", "attached")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    epoch: int
    acked_seq: int
    attached: bool
    def __init__(self, node_id: _Optional[str] = ..., epoch: _Optional[int] = ..., acked_seq: _Optional[int] = ..., attached: _Optional[bool] = ...) -> None: ...

class ShardAnswer(_message.Message):
    __slots__ = ("shard", "answered", "error")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    shard: str
    answered: bool
    error: str
    def __init__(self, shard: _Optional[str] = ..., answered: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class PageRequest(_message.Message):
    __slots__ = ("path", "query")
    PATH_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    path: str
    query: str
    def __init__(self, path: _Optional[str] = ..., query: _Optional[str] = ...) -> None: ...

class PageResponse(_message.Message):
    __slots__ = ("status", "content_type", "body")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    status: int
    content_type: str
    body: bytes
    def __init__(self, status: _Optional[int] = ..., content_type: _Optional[str] = ..., body: _Optional[bytes] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeSummary(_message.Message):
    __slots__ = ("node_id", "hostname", "agent_version", "reports_total", "duplicates_total", "first_seen_unix_seconds", "last_seen_unix_seconds", "epoch", "last_seq", "connected", "gpu_count", "spool_dropped_reports_total", "gap_reports_total", "state", "cause", "tier", "starvation_ratio", "interconnect_ratio", "gpu_seconds_lost", "needed_ingest_bytes_per_second", "starved_gpus", "jobs", "evidence", "clock_skew_seconds", "clock_refused_reports_total", "waiting_on", "waiting_job", "window_seconds", "window_seen_seconds", "shard", "stale_shards", "store_error", "store_failing_seconds", "if_fixed")
    class EvidenceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPORTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    SPOOL_DROPPED_REPORTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GAP_REPORTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    STARVATION_RATIO_FIELD_NUMBER: _ClassVar[int]
    INTERCONNECT_RATIO_FIELD_NUMBER: _ClassVar[int]
    GPU_SECONDS_LOST_FIELD_NUMBER: _ClassVar[int]
    NEEDED_INGEST_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    STARVED_GPUS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    CLOCK_SKEW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_REFUSED_REPORTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    WAITING_ON_FIELD_NUMBER: _ClassVar[int]
    WAITING_JOB_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SEEN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    STALE_SHARDS_FIELD_NUMBER: _ClassVar[int]
    STORE_ERROR_FIELD_NUMBER: _ClassVar[int]
    STORE_FAILING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IF_FIXED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    hostname: str
    agent_version: str
    reports_total: int
    duplicates_total: int
    first_seen_unix_seconds: float
    last_seen_unix_seconds: float
    epoch: int
    last_seq: int
    connected: bool
    gpu_count: int
    spool_dropped_reports_total: int
    gap_reports_total: int
    state: str
    cause: str
    tier: str
    starvation_ratio: float
    interconnect_ratio: float
    gpu_seconds_lost: float
    needed_ingest_bytes_per_second: float
    starved_gpus: str
    jobs: _containers.RepeatedScalarFieldContainer[str]
    evidence: _containers.ScalarMap[str, str]
    clock_skew_seconds: float
    clock_refused_reports_total: int
    waiting_on: _containers.RepeatedScalarFieldContainer[str]
    waiting_job: str
    window_seconds: float
    window_seen_seconds: float
    shard: str
    stale_shards: _containers.RepeatedScalarFieldContainer[str]
    store_error: str
    store_failing_seconds: float
    if_fixed: IfFixed
    def __init__(self, node_id: _Optional[str] = ..., hostname: _Optional[str] = ..., agent_version: _Optional[str] = ..., reports_total: _Optional[int] = ..., duplicates_total: _Optional[int] = ..., first_seen_unix_seconds: _Optional[float] = ..., last_seen_unix_seconds: _Optional[float] = ..., epoch: _Optional[int] = ..., last_seq: _Optional[int] = ..., connected: _Optional[bool] = ..., gpu_count: _Optional[int] = ..., spool_dropped_reports_total: _Optional[int] = ..., gap_reports_total: _Optional[int] = ..., state: _Optional[str] = ..., cause: _Optional[str] = ..., tier: _Optional[str] = ..., starvation_ratio: _Optional[float] = ..., interconnect_ratio: _Optional[float] = ..., gpu_seconds_lost: _Optional[float] = ..., needed_ingest_bytes_per_second: _Optional[float] = ..., starved_gpus: _Optional[str] = ..., jobs: _Optional[_Iterable[str]] = ..., evidence: _Optional[_Mapping[str, str]] = ..., clock_skew_seconds: _Optional[float] = ..., clock_refused_reports_total: _Optional[int] = ..., waiting_on: _Optional[_Iterable[str]] = ..., waiting_job: _Optional[str] = ..., window_seconds: _Optional[float] = ..., window_seen_seconds: _Optional[float] = ..., shard: _Optional[str] = ..., stale_shards: _Optional[_Iterable[str]] = ..., store_error: _Optional[str] = ..., store_failing_seconds: _Optional[float] = ..., if_fixed: _Optional[_Union[IfFixed, _Mapping]] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes", "shards")
    NODES_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeSummary]
    shards: _containers.RepeatedCompositeFieldContainer[ShardAnswer]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeSummary, _Mapping]]] = ..., shards: _Optional[_Iterable[_Union[ShardAnswer, _Mapping]]] = ...) -> None: ...

class ListAlertsRequest(_message.Message):
    __slots__ = ("include_resolved",)
    INCLUDE_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    include_resolved: bool
    def __init__(self, include_resolved: _Optional[bool] = ...) -> None: ...

class AlertRecord(_message.Message):
    __slots__ = ("name", "node_id", "key", "severity", "labels", "annotations", "starts_at_unix_seconds", "ends_at_unix_seconds", "shard")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    STARTS_AT_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ENDS_AT_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    name: str
    node_id: str
    key: str
    severity: str
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    starts_at_unix_seconds: float
    ends_at_unix_seconds: float
    shard: str
    def __init__(self, name: _Optional[str] = ..., node_id: _Optional[str] = ..., key: _Optional[str] = ..., severity: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., starts_at_unix_seconds: _Optional[float] = ..., ends_at_unix_seconds: _Optional[float] = ..., shard: _Optional[str] = ...) -> None: ...

class ListAlertsResponse(_message.Message):
    __slots__ = ("alerts", "shards")
    ALERTS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    alerts: _containers.RepeatedCompositeFieldContainer[AlertRecord]
    shards: _containers.RepeatedCompositeFieldContainer[ShardAnswer]
    def __init__(self, alerts: _Optional[_Iterable[_Union[AlertRecord, _Mapping]]] = ..., shards: _Optional[_Iterable[_Union[ShardAnswer, _Mapping]]] = ...) -> None: ...

class LatestReportRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class HistoryRequest(_message.Message):
    __slots__ = ("node_id", "gpu", "since_unix_seconds", "until_unix_seconds", "last_seconds", "step_seconds")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    gpu: int
    since_unix_seconds: float
    until_unix_seconds: float
    last_seconds: float
    step_seconds: int
    def __init__(self, node_id: _Optional[str] = ..., gpu: _Optional[int] = ..., since_unix_seconds: _Optional[float] = ..., until_unix_seconds: _Optional[float] = ..., last_seconds: _Optional[float] = ..., step_seconds: _Optional[int] = ...) -> None: ...

class HistoryRow(_message.Message):
    __slots__ = ("time_unix_seconds", "gpu", "samples", "values", "state", "cause", "jobs")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TIME_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    time_unix_seconds: float
    gpu: int
    samples: int
    values: _containers.ScalarMap[str, float]
    state: str
    cause: str
    jobs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, time_unix_seconds: _Optional[float] = ..., gpu: _Optional[int] = ..., samples: _Optional[int] = ..., values: _Optional[_Mapping[str, float]] = ..., state: _Optional[str] = ..., cause: _Optional[str] = ..., jobs: _Optional[_Iterable[str]] = ...) -> None: ...

class HistoryResponse(_message.Message):
    __slots__ = ("rows", "shards")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[HistoryRow]
    shards: _containers.RepeatedCompositeFieldContainer[ShardAnswer]
    def __init__(self, rows: _Optional[_Iterable[_Union[HistoryRow, _Mapping]]] = ..., shards: _Optional[_Iterable[_Union[ShardAnswer, _Mapping]]] = ...) -> None: ...

class ForgetNodeRequest(_message.Message):
    __slots__ = ("node_id",)
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    def __init__(self, node_id: _Optional[str] = ...) -> None: ...

class ForgetNodeResponse(_message.Message):
    __slots__ = ("reports_deleted",)
    REPORTS_DELETED_FIELD_NUMBER: _ClassVar[int]
    reports_deleted: int
    def __init__(self, reports_deleted: _Optional[int] = ...) -> None: ...

class JobsRequest(_message.Message):
    __slots__ = ("last_seconds",)
    LAST_SECONDS_FIELD_NUMBER: _ClassVar[int]
    last_seconds: float
    def __init__(self, last_seconds: _Optional[float] = ...) -> None: ...

class JobTotal(_message.Message):
    __slots__ = ("job", "gpu_hours", "gpu_hours_lost", "gpu_hours_lost_by_cause", "nodes", "first_unix_seconds", "last_unix_seconds", "gpu_hours_unmeasured")
    class GpuHoursLostByCauseEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_LOST_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_LOST_BY_CAUSE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    FIRST_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_UNMEASURED_FIELD_NUMBER: _ClassVar[int]
    job: str
    gpu_hours: float
    gpu_hours_lost: float
    gpu_hours_lost_by_cause: _containers.ScalarMap[str, float]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    first_unix_seconds: float
    last_unix_seconds: float
    gpu_hours_unmeasured: float
    def __init__(self, job: _Optional[str] = ..., gpu_hours: _Optional[float] = ..., gpu_hours_lost: _Optional[float] = ..., gpu_hours_lost_by_cause: _Optional[_Mapping[str, float]] = ..., nodes: _Optional[_Iterable[str]] = ..., first_unix_seconds: _Optional[float] = ..., last_unix_seconds: _Optional[float] = ..., gpu_hours_unmeasured: _Optional[float] = ...) -> None: ...

class JobsResponse(_message.Message):
    __slots__ = ("jobs", "shards")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobTotal]
    shards: _containers.RepeatedCompositeFieldContainer[ShardAnswer]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobTotal, _Mapping]]] = ..., shards: _Optional[_Iterable[_Union[ShardAnswer, _Mapping]]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobVerdict(_message.Message):
    __slots__ = ("job", "source", "state", "nodes", "gpus", "world_size", "ranks_reported", "straggler_nodes", "cause", "job_wide", "wait_ratio", "gpu_seconds_lost", "needed_bytes_per_second", "evidence", "time_unix_seconds", "notes", "shard", "if_fixed")
    class EvidenceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    RANKS_REPORTED_FIELD_NUMBER: _ClassVar[int]
    STRAGGLER_NODES_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    JOB_WIDE_FIELD_NUMBER: _ClassVar[int]
    WAIT_RATIO_FIELD_NUMBER: _ClassVar[int]
    GPU_SECONDS_LOST_FIELD_NUMBER: _ClassVar[int]
    NEEDED_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    IF_FIXED_FIELD_NUMBER: _ClassVar[int]
    job: str
    source: str
    state: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    gpus: int
    world_size: int
    ranks_reported: int
    straggler_nodes: _containers.RepeatedScalarFieldContainer[str]
    cause: str
    job_wide: bool
    wait_ratio: float
    gpu_seconds_lost: float
    needed_bytes_per_second: float
    evidence: _containers.ScalarMap[str, str]
    time_unix_seconds: float
    notes: _containers.RepeatedScalarFieldContainer[str]
    shard: str
    if_fixed: IfFixed
    def __init__(self, job: _Optional[str] = ..., source: _Optional[str] = ..., state: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., gpus: _Optional[int] = ..., world_size: _Optional[int] = ..., ranks_reported: _Optional[int] = ..., straggler_nodes: _Optional[_Iterable[str]] = ..., cause: _Optional[str] = ..., job_wide: _Optional[bool] = ..., wait_ratio: _Optional[float] = ..., gpu_seconds_lost: _Optional[float] = ..., needed_bytes_per_second: _Optional[float] = ..., evidence: _Optional[_Mapping[str, str]] = ..., time_unix_seconds: _Optional[float] = ..., notes: _Optional[_Iterable[str]] = ..., shard: _Optional[str] = ..., if_fixed: _Optional[_Union[IfFixed, _Mapping]] = ...) -> None: ...

class IfFixed(_message.Message):
    __slots__ = ("speedup", "bottleneck", "target", "target_speedup", "gpu_hours_per_day", "money_per_day", "currency", "notes")
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    BOTTLENECK_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TARGET_SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    MONEY_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    CURRENCY_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    speedup: float
    bottleneck: str
    target: str
    target_speedup: float
    gpu_hours_per_day: float
    money_per_day: float
    currency: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, speedup: _Optional[float] = ..., bottleneck: _Optional[str] = ..., target: _Optional[str] = ..., target_speedup: _Optional[float] = ..., gpu_hours_per_day: _Optional[float] = ..., money_per_day: _Optional[float] = ..., currency: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "shards")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobVerdict]
    shards: _containers.RepeatedCompositeFieldContainer[ShardAnswer]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobVerdict, _Mapping]]] = ..., shards: _Optional[_Iterable[_Union[ShardAnswer, _Mapping]]] = ...) -> None: ...

class LedgerRequest(_message.Message):
    __slots__ = ("since_unix_seconds", "until_unix_seconds", "by")
    SINCE_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    UNTIL_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    since_unix_seconds: float
    until_unix_seconds: float
    by: str
    def __init__(self, since_unix_seconds: _Optional[float] = ..., until_unix_seconds: _Optional[float] = ..., by: _Optional[str] = ...) -> None: ...

class LedgerStraggler(_message.Message):
    __slots__ = ("node_id", "gpu_hours_waited")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_WAITED_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    gpu_hours_waited: float
    def __init__(self, node_id: _Optional[str] = ..., gpu_hours_waited: _Optional[float] = ...) -> None: ...

class LedgerRow(_message.Message):
    __slots__ = ("key", "gpu_hours_held", "gpu_hours_computing", "gpu_hours_lost", "cost", "cost_lost", "currency", "stragglers", "nodes", "gpu_model", "first_unix_seconds", "last_unix_seconds", "jobs", "account", "namespace", "gpu_hours_unmeasured", "cost_unmeasured", "worth_gpu_hours_per_day", "worth_money_per_day")
    class GpuHoursLostEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    KEY_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_HELD_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_COMPUTING_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_LOST_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    COST_LOST_FIELD_NUMBER: _ClassVar[int]
    CURRENCY_FIELD_NUMBER: _ClassVar[int]
    STRAGGLERS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    FIRST_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LAST_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    GPU_HOURS_UNMEASURED_FIELD_NUMBER: _ClassVar[int]
    COST_UNMEASURED_FIELD_NUMBER: _ClassVar[int]
    WORTH_GPU_HOURS_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    WORTH_MONEY_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    key: str
    gpu_hours_held: float
    gpu_hours_computing: float
    gpu_hours_lost: _containers.ScalarMap[str, float]
    cost: float
    cost_lost: float
    currency: str
    stragglers: _containers.RepeatedCompositeFieldContainer[LedgerStraggler]
    nodes: _containers.RepeatedScalarFieldContainer[str]
    gpu_model: str
    first_unix_seconds: float
    last_unix_seconds: float
    jobs: _containers.RepeatedScalarFieldContainer[str]
    account: str
    namespace: str
    gpu_hours_unmeasured: float
    cost_unmeasured: float
    worth_gpu_hours_per_day: float
    worth_money_per_day: float
    def __init__(self, key: _Optional[str] = ..., gpu_hours_held: _Optional[float] = ..., gpu_hours_computing: _Optional[float] = ..., gpu_hours_lost: _Optional[_Mapping[str, float]] = ..., cost: _Optional[float] = ..., cost_lost: _Optional[float] = ..., currency: _Optional[str] = ..., stragglers: _Optional[_Iterable[_Union[LedgerStraggler, _Mapping]]] = ..., nodes: _Optional[_Iterable[str]] = ..., gpu_model: _Optional[str] = ..., first_unix_seconds: _Optional[float] = ..., last_unix_seconds: _Optional[float] = ..., jobs: _Optional[_Iterable[str]] = ..., account: _Optional[str] = ..., namespace: _Optional[str] = ..., gpu_hours_unmeasured: _Optional[float] = ..., cost_unmeasured: _Optional[float] = ..., worth_gpu_hours_per_day: _Optional[float] = ..., worth_money_per_day: _Optional[float] = ...) -> None: ...

class LedgerResponse(_message.Message):
    __slots__ = ("rows", "shards")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SHARDS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[LedgerRow]
    shards: _containers.RepeatedCompositeFieldContainer[ShardAnswer]
    def __init__(self, rows: _Optional[_Iterable[_Union[LedgerRow, _Mapping]]] = ..., shards: _Optional[_Iterable[_Union[ShardAnswer, _Mapping]]] = ...) -> None: ...
