"""``make setup`` without setuptools' "Editable installation." banner, and nothing else hidden.

Running ``make setup`` takes a minute; this checks the mechanism instead: the Makefile's
``PYTHONWARNINGS`` filter, in a Python that records warnings as pip's hook runner records the
build backend's (``warnings.catch_warnings(record=True)``), drops the notice setuptools emits at the
end of every editable install and keeps every other warning. (That the banner is gone from a real
``make setup`` is seen on a fresh clone.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.fakes.trees import REPO

_BACKEND = """
import json, warnings
from setuptools.warnings import InformationOnly, SetuptoolsDeprecationWarning
with warnings.catch_warnings(record=True) as seen:
    # What setuptools/command/editable_wheel.py emits as an editable install ends.
    InformationOnly.emit("Editable installation.", "Please be careful with folders in your working directory.")
    SetuptoolsDeprecationWarning.emit("A real deprecation.", "It must still be seen.")
    warnings.warn("Another warning of the backend", UserWarning)
print(json.dumps([str(w.message).splitlines()[0] for w in seen]))
"""


def _setup_filter() -> str:
    makefile = (REPO / "Makefile").read_text()
    value = re.search(r"^SETUP_WARNINGS\s*:=\s*(.+)$", makefile, re.MULTILINE)
    assert value is not None, "the Makefile no longer sets SETUP_WARNINGS"
    assert "\tPYTHONWARNINGS=\"$(SETUP_WARNINGS)\" $(BIN)/pip install -q -e '.[dev]'" in makefile
    return value.group(1).strip()


def test_the_editable_notice_is_dropped_and_every_other_warning_kept() -> None:
    env = {**os.environ, "PYTHONWARNINGS": _setup_filter()}
    done = subprocess.run([sys.executable, "-c", _BACKEND], env=env, capture_output=True, text=True, check=True)
    assert done.stderr == ""  # the filter itself is valid (Python says "Invalid -W option" otherwise)
    assert json.loads(done.stdout) == ["A real deprecation.", "Another warning of the backend"]
    # Without the filter the notice is there: the check can fail.
    plain = subprocess.run([sys.executable, "-c", _BACKEND], capture_output=True, text=True, check=True)
    assert json.loads(plain.stdout)[0] == "Editable installation."
