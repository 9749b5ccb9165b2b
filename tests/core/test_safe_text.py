"""``core/program/safe_text.py``: what a table or a log line shows of any text is printable and
keeps printable text as it is; a CSV cell never starts a formula and reads back exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nodeagent.core.program.safe_text import FORMULA_STARTS, csv_cell, csv_value, escape_controls


@given(st.text())
def test_escaped_text_is_printable_and_printable_text_is_left_alone(text: str) -> None:
    shown = escape_controls(text)
    assert shown.isprintable()
    assert (shown == text) == text.isprintable()
    assert escape_controls(shown) == shown  # escaping twice changes nothing more


def test_c0_c1_and_del_are_escaped_as_python_writes_them() -> None:
    assert escape_controls("a\x1b[2J\r\n\tb\x7f\x85\x9b\u202e") == "a\\x1b[2J\\r\\n\\tb\\x7f\\x85\\x9b\\u202e"


@given(st.text())
def test_a_csv_cell_never_starts_a_formula_and_reads_back(text: str) -> None:
    cell = csv_cell(text)
    assert isinstance(cell, str)
    assert csv_value(cell) == text
    if cell.startswith(FORMULA_STARTS):
        float(cell)  # only a plain number may: a spreadsheet reads it as that number


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**12), 10**12))
def test_numbers_stay_numbers_negative_ones_too(number: float) -> None:
    assert csv_cell(number) == number
    for text in (f"{number:.4f}", f"{number:.2f}", repr(float(number))):
        assert csv_cell(text) == text
