"""The field values of a tick into a ``GpuSample`` (``agent/gpu/fields.py``): each reading where the
plan says, and no Python call per field or per link; GPM metrics through plain ctypes structures."""

from __future__ import annotations

import ctypes
import sys
from types import FrameType
from typing import Any

import pynvml

from nodeagent.agent.gpu import fields as f
from nodeagent.agent.gpu.nvml_readings import decode_columns, decode_field_values
from nodeagent.agent.gpu.nvml_sampling import _GpmMetric, _GpmMetricsGet
from nodeagent.v1 import nodeagent_pb2 as pb

LINKS = 18  # H100 and B200: links 12-17 have no data-CRC field


def _values(plan: f.TickPlan) -> dict[f.FieldKey, int | float]:
    """A distinct value per requested field (floats where NVML may answer a double)."""
    values: dict[f.FieldKey, int | float] = {key: 1000 * key[0] + key[1] + 1 for key in plan.requests}
    values[(f.FI_GPU_TEMP, 0)] = 61.7
    values[(f.FI_POWER_INSTANT, 0)] = 350_250.0
    for link in range(LINKS):
        values[(f.FI_NVLINK_GET_STATE, link)] = f.NVLINK_STATE_ACTIVE if link % 2 == 0 else 0
    return values


def test_every_field_lands_where_it_did_per_link_and_per_gpu() -> None:
    plan = f.tick_plan(LINKS, unsupported={(f.FI_NVLINK_THROUGHPUT_DATA_TX, 0)})  # NVLink5's byte counters
    assert plan.nvlink_bytes == (f.FI_NVLINK_COUNT_XMIT_BYTES, f.FI_NVLINK_COUNT_RCV_BYTES, 1)
    values = _values(plan)
    del values[(f.FI_NVLINK_ERROR_DL_CRC, 3)]  # a reading NVML did not give stays unset
    sample = pb.GpuSample()
    f.fill_sample(values, plan, sample)
    assert sample.pcie_rx_bytes_total == 1000 * f.FI_PCIE_COUNT_RX_BYTES + 1
    assert sample.energy_millijoules_total == 1000 * f.FI_TOTAL_ENERGY_CONSUMPTION + 1
    assert sample.temperature_celsius == 61.0
    assert sample.memory_temperature_celsius == float(1000 * f.FI_MEMORY_TEMP + 1)
    assert sample.power_watts == 350.25
    assert sample.remapped_rows_pending and sample.remapped_rows_failure
    assert [n.link for n in sample.nvlinks] == list(range(LINKS))
    assert [n.active for n in sample.nvlinks] == [link % 2 == 0 for link in range(LINKS)]
    tx = [1000 * f.FI_NVLINK_COUNT_XMIT_BYTES + link + 1 for link in range(LINKS)]
    assert [n.tx_bytes_total for n in sample.nvlinks] == tx
    assert sample.nvlink_tx_bytes_total == sum(tx)
    assert sample.nvlinks[5].crc_data_errors_total == 1000 * (f.FI_NVLINK_CRC_DATA_ERROR_COUNT_L0 + 5) + 1
    assert sample.nvlinks[11].crc_data_errors_total == 1000 * (f.FI_NVLINK_CRC_DATA_ERROR_COUNT_L6 + 5) + 1
    assert not any(n.HasField("crc_data_errors_total") for n in sample.nvlinks[12:])
    assert sample.nvlinks[7].replay_errors_total == 1000 * f.FI_NVLINK_ERROR_DL_REPLAY + 7 + 1
    assert not sample.nvlinks[3].HasField("crc_flit_errors_total")
    assert sample.nvlinks[4].crc_flit_errors_total == 1000 * f.FI_NVLINK_ERROR_DL_CRC + 4 + 1


def test_without_a_byte_source_the_links_carry_no_bytes_and_a_sum_past_2_63_is_left_out() -> None:
    refused = {(f.FI_NVLINK_THROUGHPUT_DATA_TX, 0), (f.FI_NVLINK_COUNT_XMIT_BYTES, 0)}
    plan = f.tick_plan(2, unsupported=refused)
    sample = pb.GpuSample()
    f.fill_sample(_values(plan), plan, sample)
    assert plan.nvlink_bytes is None and len(sample.nvlinks) == 2
    assert not any(n.HasField("tx_bytes_total") for n in sample.nvlinks)
    assert not sample.HasField("nvlink_tx_bytes_total")
    plan = f.tick_plan(2, unsupported=set())
    values = _values(plan) | {(f.FI_NVLINK_THROUGHPUT_DATA_RX, link): 1 << 53 for link in range(2)}
    sample = pb.GpuSample()
    f.fill_sample(values, plan, sample)
    assert sample.nvlinks[0].rx_bytes_total == (1 << 53) * 1024
    assert not sample.HasField("nvlink_rx_bytes_total")  # 2 * 2^63: readers sum the links
    assert sample.HasField("nvlink_tx_bytes_total")


def test_filling_a_sample_makes_no_python_call_per_field_or_per_link() -> None:
    plan = f.tick_plan(LINKS, unsupported=set())
    values, calls = _values(plan), [0]

    def count(_frame: FrameType, event: str, _arg: Any) -> None:
        calls[0] += event == "call"

    sys.setprofile(count)
    try:
        f.fill_sample(values, plan, pb.GpuSample())
    finally:
        sys.setprofile(None)
    assert calls[0] <= 2, f"fill_sample made {calls[0]} Python calls for {len(plan.requests)} fields"


def test_the_gpm_structures_have_pynvml_s_layout() -> None:
    assert ctypes.sizeof(_GpmMetric) == ctypes.sizeof(pynvml.c_nvmlGpmMetric_t)
    assert ctypes.sizeof(_GpmMetricsGet) == ctypes.sizeof(pynvml.c_nvmlGpmMetricsGet_t)
    for ours, theirs in ((_GpmMetric, pynvml.c_nvmlGpmMetric_t), (_GpmMetricsGet, pynvml.c_nvmlGpmMetricsGet_t)):
        for name, _kind in theirs._fields_:
            assert getattr(ours, name).offset == getattr(theirs, name).offset, name


def test_field_values_decode_in_one_pass_as_each_entry_reads() -> None:
    """``decode_columns`` unpacks every entry at once; each value must be what reading that entry's
    union by its own type gives (pynvml's structures are the reference), a failed entry's return
    kept, and a type this pynvml does not know read as nothing, not as garbage."""
    entries = [  # (valueType, value, nvmlReturn)
        (pynvml.NVML_VALUE_TYPE_DOUBLE, 61.75, 0),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, 4_000_000_000, 0),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, (1 << 64) - 2, 0),
        (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, -(1 << 62), 0),
        (pynvml.NVML_VALUE_TYPE_SIGNED_INT, -7, 0),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, 65_000, 0),
        (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 5, pynvml.NVML_ERROR_NOT_SUPPORTED),
    ]
    members = [name for name, _type in pynvml.c_nvmlValue_t._fields_]  # by nvmlValueType_t
    array = (pynvml.c_nvmlFieldValue_t * len(entries))()
    for entry, (kind, value, ret) in zip(array, entries, strict=True):
        entry.value.ullVal = 0xDEADBEEFDEADBEEF  # the union's unused bytes hold garbage
        entry.valueType, entry.nvmlReturn = kind, ret
        setattr(entry.value, members[kind], value)
    rets, values = decode_columns(array)
    assert rets == tuple(ret for _k, _v, ret in entries)
    assert values[:6] == tuple(value for _k, value, _r in entries[:6])
    assert decode_field_values(array)[6] == (pynvml.NVML_ERROR_NOT_SUPPORTED, None)
    array[2].valueType = 99  # a type newer than this pynvml
    rets, values = decode_columns(array)
    assert values[2] is None and values[0] == 61.75 and values[5] == 65_000
