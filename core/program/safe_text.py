"""What a name from the wire may do to an output: nothing. Job keys, accounts, namespaces, process
and GPU names come from nodes (or a node's users); the terminal and the spreadsheet that show
them must not take them as commands.

- ``escape_controls``: for every table and log line. A character that is not printable (C0 and
  DEL, C1, and the rest ``str.isprintable`` refuses: bidi overrides, line and paragraph
  separators) is written as Python writes it in a literal (``\\x1b``, ``\\n``, ``\\x9b``,
  ``\\u202e``), so ESC, CR and LF can neither move the cursor nor start a line of their own.
- ``csv_cell``: for every CSV cell, as OWASP's CSV injection guidance says: a text cell that
  begins with ``=``, ``+``, ``-``, ``@``, tab or CR gets a leading ``'``, so a spreadsheet shows
  it as text instead of running it. A number stays a number: an ``int`` or ``float``, or a text
  cell that is a plain decimal number (``-0.25``, ``3e-05``), is left as it is (a spreadsheet
  reads it as the number it is, never as a formula). A text cell that begins with ``'`` gets one
  more, so the rule reads back exactly: drop one leading ``'`` of a cell that has one
  (``csv_value``).
"""

from __future__ import annotations

import re
from typing import Final

# OWASP's list: what makes a spreadsheet read a cell as a formula (or a DDE command).
FORMULA_STARTS: Final = ("=", "+", "-", "@", "\t", "\r")
QUOTE: Final = "'"
# A plain decimal number: a sign only as a minus, digits, a point, an exponent.
_NUMBER: Final = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def escape_controls(text: str) -> str:
    """``text`` with every character that is not printable escaped (``\\x1b``); printable text
    (the usual case, checked in one C call) comes back as it is."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


def csv_cell(value: object) -> object:
    """A CSV cell that a spreadsheet cannot run: see the module's docstring."""
    if not isinstance(value, str) or not value:
        return value
    if value.startswith(QUOTE) or (value.startswith(FORMULA_STARTS) and not _NUMBER.fullmatch(value)):
        return QUOTE + value
    return value


def csv_value(cell: str) -> str:
    """A cell ``csv_cell`` wrote, read back as the value it was given (as text)."""
    return cell[1:] if cell.startswith(QUOTE) else cell


def _escaped(ch: str) -> str:
    code = ord(ch)
    if ch in _SHORT:
        return _SHORT[ch]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


_SHORT: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
