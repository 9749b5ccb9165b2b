from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobHome(_message.Message):
    __slots__ = ("collector", "worker")
    COLLECTOR_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    collector: str
    worker: int
    def __init__(self, collector: _Optional[str] = ..., worker: _Optional[int] = ...) -> None: ...

class JobLinkValues(_message.Message):
    __slots__ = ("nic_speeds_bytes_per_second", "fabric_nic", "fabric_peak_bytes_per_second", "fabric_speed_bytes_per_second", "pcie_bytes_per_second", "pcie_max_bytes_per_second", "nvlink_inactive", "nvlink_errors", "nic_errors", "rdma_errors", "fabric_busy_ratio", "tcp_retransmit_ratio", "wire_nic")
    class NicSpeedsBytesPerSecondEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NIC_SPEEDS_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    FABRIC_NIC_FIELD_NUMBER: _ClassVar[int]
    FABRIC_PEAK_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    FABRIC_SPEED_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PCIE_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PCIE_MAX_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    NVLINK_INACTIVE_FIELD_NUMBER: _ClassVar[int]
    NVLINK_ERRORS_FIELD_NUMBER: _ClassVar[int]
    NIC_ERRORS_FIELD_NUMBER: _ClassVar[int]
    RDMA_ERRORS_FIELD_NUMBER: _ClassVar[int]
    FABRIC_BUSY_RATIO_FIELD_NUMBER: _ClassVar[int]
    TCP_RETRANSMIT_RATIO_FIELD_NUMBER: _ClassVar[int]
    WIRE_NIC_FIELD_NUMBER: _ClassVar[int]
    nic_speeds_bytes_per_second: _containers.ScalarMap[str, float]
    fabric_nic: str
    fabric_peak_bytes_per_second: float
    fabric_speed_bytes_per_second: float
    pcie_bytes_per_second: float
    pcie_max_bytes_per_second: float
    nvlink_inactive: int
    nvlink_errors: int
    nic_errors: int
    rdma_errors: int
    fabric_busy_ratio: float
    tcp_retransmit_ratio: float
    wire_nic: str
    def __init__(self, nic_speeds_bytes_per_second: _Optional[_Mapping[str, float]] = ..., fabric_nic: _Optional[str] = ..., fabric_peak_bytes_per_second: _Optional[float] = ..., fabric_speed_bytes_per_second: _Optional[float] = ..., pcie_bytes_per_second: _Optional[float] = ..., pcie_max_bytes_per_second: _Optional[float] = ..., nvlink_inactive: _Optional[int] = ..., nvlink_errors: _Optional[int] = ..., nic_errors: _Optional[int] = ..., rdma_errors: _Optional[int] = ..., fabric_busy_ratio: _Optional[float] = ..., tcp_retransmit_ratio: _Optional[float] = ..., wire_nic: _Optional[str] = ...) -> None: ...

class JobNodeValues(_message.Message):
    __slots__ = ("gpus", "assigned", "warmup", "busy_ratio", "sm_active_ratio", "throttled_ratio", "data_wait_ratio", "window_data_wait_ratio", "idle_ratio", "interconnect_ratio", "own_cause", "evidence_numbers", "evidence_words", "evidence_cause", "needed_bytes_per_second", "clock_mhz", "link", "window_sm_active_ratio", "window_computing_ratio", "wait_unknown_reason", "wait_unknown_words")
    class EvidenceNumbersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class EvidenceWordsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    GPUS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNED_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    BUSY_RATIO_FIELD_NUMBER: _ClassVar[int]
    SM_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_RATIO_FIELD_NUMBER: _ClassVar[int]
    DATA_WAIT_RATIO_FIELD_NUMBER: _ClassVar[int]
    WINDOW_DATA_WAIT_RATIO_FIELD_NUMBER: _ClassVar[int]
    IDLE_RATIO_FIELD_NUMBER: _ClassVar[int]
    INTERCONNECT_RATIO_FIELD_NUMBER: _ClassVar[int]
    OWN_CAUSE_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_NUMBERS_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_WORDS_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_CAUSE_FIELD_NUMBER: _ClassVar[int]
    NEEDED_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    CLOCK_MHZ_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    WINDOW_SM_ACTIVE_RATIO_FIELD_NUMBER: _ClassVar[int]
    WINDOW_COMPUTING_RATIO_FIELD_NUMBER: _ClassVar[int]
    WAIT_UNKNOWN_REASON_FIELD_NUMBER: _ClassVar[int]
    WAIT_UNKNOWN_WORDS_FIELD_NUMBER: _ClassVar[int]
    gpus: int
    assigned: int
    warmup: int
    busy_ratio: float
    sm_active_ratio: float
    throttled_ratio: float
    data_wait_ratio: float
    window_data_wait_ratio: float
    idle_ratio: float
    interconnect_ratio: float
    own_cause: str
    evidence_numbers: _containers.ScalarMap[str, float]
    evidence_words: _containers.ScalarMap[str, str]
    evidence_cause: str
    needed_bytes_per_second: float
    clock_mhz: float
    link: JobLinkValues
    window_sm_active_ratio: float
    window_computing_ratio: float
    wait_unknown_reason: str
    wait_unknown_words: str
    def __init__(self, gpus: _Optional[int] = ..., assigned: _Optional[int] = ..., warmup: _Optional[int] = ..., busy_ratio: _Optional[float] = ..., sm_active_ratio: _Optional[float] = ..., throttled_ratio: _Optional[float] = ..., data_wait_ratio: _Optional[float] = ..., window_data_wait_ratio: _Optional[float] = ..., idle_ratio: _Optional[float] = ..., interconnect_ratio: _Optional[float] = ..., own_cause: _Optional[str] = ..., evidence_numbers: _Optional[_Mapping[str, float]] = ..., evidence_words: _Optional[_Mapping[str, str]] = ..., evidence_cause: _Optional[str] = ..., needed_bytes_per_second: _Optional[float] = ..., clock_mhz: _Optional[float] = ..., link: _Optional[_Union[JobLinkValues, _Mapping]] = ..., window_sm_active_ratio: _Optional[float] = ..., window_computing_ratio: _Optional[float] = ..., wait_unknown_reason: _Optional[str] = ..., wait_unknown_words: _Optional[str] = ...) -> None: ...

class JobStepMessage(_message.Message):
    __slots__ = ("job", "source", "node_id", "step", "time_unix_seconds", "gpus", "ranks", "ranks_count", "world_size", "node_rank", "values", "gpu_seconds_lost")
    class GpuSecondsLostEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    RANKS_COUNT_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    GPU_SECONDS_LOST_FIELD_NUMBER: _ClassVar[int]
    job: str
    source: str
    node_id: str
    step: int
    time_unix_seconds: float
    gpus: _containers.RepeatedScalarFieldContainer[int]
    ranks: _containers.RepeatedScalarFieldContainer[int]
    ranks_count: int
    world_size: int
    node_rank: int
    values: JobNodeValues
    gpu_seconds_lost: _containers.ScalarMap[int, float]
    def __init__(self, job: _Optional[str] = ..., source: _Optional[str] = ..., node_id: _Optional[str] = ..., step: _Optional[int] = ..., time_unix_seconds: _Optional[float] = ..., gpus: _Optional[_Iterable[int]] = ..., ranks: _Optional[_Iterable[int]] = ..., ranks_count: _Optional[int] = ..., world_size: _Optional[int] = ..., node_rank: _Optional[int] = ..., values: _Optional[_Union[JobNodeValues, _Mapping]] = ..., gpu_seconds_lost: _Optional[_Mapping[int, float]] = ...) -> None: ...

class JobLeaveMessage(_message.Message):
    __slots__ = ("job", "node_id", "time_unix_seconds", "note")
    JOB_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    job: str
    node_id: str
    time_unix_seconds: float
    note: str
    def __init__(self, job: _Optional[str] = ..., node_id: _Optional[str] = ..., time_unix_seconds: _Optional[float] = ..., note: _Optional[str] = ...) -> None: ...

class JobNodeMessage(_message.Message):
    __slots__ = ("step", "leave", "home")
    STEP_FIELD_NUMBER: _ClassVar[int]
    LEAVE_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    step: JobStepMessage
    leave: JobLeaveMessage
    home: JobHome
    def __init__(self, step: _Optional[_Union[JobStepMessage, _Mapping]] = ..., leave: _Optional[_Union[JobLeaveMessage, _Mapping]] = ..., home: _Optional[_Union[JobHome, _Mapping]] = ...) -> None: ...

class JobNodeMessages(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[JobNodeMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[JobNodeMessage, _Mapping]]] = ...) -> None: ...

class JobWaitMessage(_message.Message):
    __slots__ = ("job", "node_id", "stragglers", "wait_ratio", "echo", "clear", "home", "own", "wait_unknown_reason")
    JOB_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STRAGGLERS_FIELD_NUMBER: _ClassVar[int]
    WAIT_RATIO_FIELD_NUMBER: _ClassVar[int]
    ECHO_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    OWN_FIELD_NUMBER: _ClassVar[int]
    WAIT_UNKNOWN_REASON_FIELD_NUMBER: _ClassVar[int]
    job: str
    node_id: str
    stragglers: _containers.RepeatedScalarFieldContainer[str]
    wait_ratio: float
    echo: bool
    clear: bool
    home: JobHome
    own: bool
    wait_unknown_reason: str
    def __init__(self, job: _Optional[str] = ..., node_id: _Optional[str] = ..., stragglers: _Optional[_Iterable[str]] = ..., wait_ratio: _Optional[float] = ..., echo: _Optional[bool] = ..., clear: _Optional[bool] = ..., home: _Optional[_Union[JobHome, _Mapping]] = ..., own: _Optional[bool] = ..., wait_unknown_reason: _Optional[str] = ...) -> None: ...

class JobWaitMessages(_message.Message):
    __slots__ = ("waits",)
    WAITS_FIELD_NUMBER: _ClassVar[int]
    waits: _containers.RepeatedCompositeFieldContainer[JobWaitMessage]
    def __init__(self, waits: _Optional[_Iterable[_Union[JobWaitMessage, _Mapping]]] = ...) -> None: ...

class JobRelayAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
