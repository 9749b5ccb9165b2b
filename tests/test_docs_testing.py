"""docs/testing.md says how many tests the second pass of ``make test`` runs (``pytest -m alone``):
it said seven while twelve ran. The count is kept true here, counted as pytest would select them."""

from __future__ import annotations

import re

from tests.fakes.trees import REPO


def _marked_alone() -> list[str]:
    """Every test function marked ``@pytest.mark.alone`` (none is parametrized: one test each)."""
    found = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            if line.startswith("@pytest.mark.alone"):
                following = lines[index + 1 : index + 6]
                assert not any("parametrize" in f for f in following), f"{path}: count its cases here"
                name = next(f for f in following if f.startswith(("def ", "async def ")))
                found.append(f"{path.name}::{name.split('(')[0].split()[-1]}")
    return found


def test_the_second_pass_count_in_docs_testing_is_the_marked_tests() -> None:
    said = re.search(r"`pytest -m alone`, the (\d+) tests marked `alone`", (REPO / "docs" / "testing.md").read_text())
    assert said is not None, "docs/testing.md no longer says how many tests the second pass runs"
    marked = _marked_alone()
    assert int(said.group(1)) == len(marked), marked
