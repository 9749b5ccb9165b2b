"""The sample reader reads back exactly what prometheus_client's parser reads of the same text."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from nodeagent.core.exposition.text import (
    TextFamily,
    label_text,
    parse_series,
    render,
    sample_line,
    series_values,
)


def _families() -> list[TextFamily]:
    gpu = TextFamily("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).")
    for index in range(3):
        labels = label_text({"gpu": str(index), "modelName": "NVIDIA H100 80GB HBM3", "UUID": f"GPU-{index}"})
        gpu.lines.append(sample_line(gpu.name, labels, 40 + index))
    odd = TextFamily("nodeagent_odd", "gauge", "Escapes, floats and no labels.")
    odd.add(label_text({"path": 'C:\\dir "x"\nnext', "empty": ""}), 0.25)
    odd.add(label_text({"k": "v"}), math.inf)
    odd.add(label_text({"k": "w"}), 2**60 + 1)
    odd.lines.append(sample_line(odd.name, "", -1.5e-7))
    return [gpu, odd]


def test_series_values_and_parse_series_read_what_prometheus_client_reads() -> None:
    """Remote write keys its series on the text before the value and parses it once."""
    series, values = series_values(_families())
    ours = [
        (name, dict(labels), value) for (name, labels), value in zip(map(parse_series, series), values, strict=True)
    ]
    theirs = [
        (sample.name, sample.labels, sample.value)
        for family in text_string_to_metric_families(render(_families()))
        for sample in family.samples
    ]
    assert ours == theirs
    assert ours[3][1] == {"empty": "", "path": 'C:\\dir "x"\nnext'}
    assert series[0] == 'DCGM_FI_DEV_GPU_TEMP{UUID="GPU-0",gpu="0",modelName="NVIDIA H100 80GB HBM3"}'
    assert series[-1] == "nodeagent_odd"
