"""What a diag run produces: check results, and the verdict and exit status they add up to."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

# A run that could not be made (a bad flag, an unreadable profile) exits 2 from the command line
# (core/program/command_line.py: EXIT_USAGE), as every command's bad input does.
EXIT_HEALTHY: Final = 0  # every check passed or warned
EXIT_UNHEALTHY: Final = 1  # at least one FAIL

NODE: Final = "node"  # the subject of checks about the node as a whole


class Status(enum.StrEnum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check of one subject.

    ``subject`` names what was checked: ``node``, ``gpu:3``, ``gpu:3/nvlink:5``, ``nic:eth0``,
    ``rdma:mlx5_0/1``, ``mount:/data``. ``value`` is what was measured and ``expected`` what it
    was held against (empty when nothing was expected), both as a person would write them;
    ``hint`` says in one line what to do about a WARN or FAIL, or why a check was skipped."""

    check: str
    subject: str
    status: Status
    value: str
    expected: str = ""
    hint: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "check": self.check,
            "subject": self.subject,
            "status": self.status.value,
            "value": self.value,
            "expected": self.expected,
            "hint": self.hint,
        }


def passed(check: str, subject: str, value: str, expected: str = "") -> CheckResult:
    return CheckResult(check, subject, Status.PASS, value, expected)


def warned(check: str, subject: str, value: str, expected: str, hint: str) -> CheckResult:
    return CheckResult(check, subject, Status.WARN, value, expected, hint)


def failed(check: str, subject: str, value: str, expected: str, hint: str) -> CheckResult:
    return CheckResult(check, subject, Status.FAIL, value, expected, hint)


def skipped(check: str, subject: str, reason: str, value: str = "-") -> CheckResult:
    return CheckResult(check, subject, Status.SKIP, value, "", reason)


@dataclass(frozen=True, slots=True)
class DiagReport:
    """Every result of one run, in the order the checks ran, and what they add up to."""

    node_id: str
    profile: str | None
    results: tuple[CheckResult, ...]
    duration_seconds: float
    probe: dict[str, Any] | None = None  # the storage probe's figures, when it ran
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        tally = Counter(r.status for r in self.results)
        object.__setattr__(self, "counts", {s.value: tally.get(s, 0) for s in Status})

    @property
    def healthy(self) -> bool:
        return self.counts[Status.FAIL.value] == 0

    @property
    def exit_code(self) -> int:
        return EXIT_HEALTHY if self.healthy else EXIT_UNHEALTHY

    def verdict(self) -> str:
        """One line: HEALTHY or UNHEALTHY, the tally, and what failed."""
        c = self.counts
        tally = f"{c['FAIL']} fail, {c['WARN']} warn, {c['PASS']} pass, {c['SKIP']} skip"
        if self.healthy:
            return f"HEALTHY ({tally})"
        failures = [r for r in self.results if r.status is Status.FAIL]
        named = "; ".join(_short(r) for r in failures[:3])
        more = f"; and {len(failures) - 3} more" if len(failures) > 3 else ""
        return f"UNHEALTHY ({tally}): {named}{more}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "profile": self.profile,
            "verdict": "healthy" if self.healthy else "unhealthy",
            "verdict_line": self.verdict(),
            "exit_code": self.exit_code,
            "duration_seconds": round(self.duration_seconds, 3),
            "counts": self.counts,
            "checks": [r.to_dict() for r in self.results],
            "probe": self.probe,
        }


def summarize(
    check: str, group: str, problems: Iterable[CheckResult], all_good_value: str, expected: str = ""
) -> list[CheckResult]:
    """Per-subject checks (one per GPU, NIC, link, ...) readable at a glance: the subjects that
    are not fine, each on its own row, or one PASS row for the whole ``group`` ("8 GPUs")."""
    found = list(problems)
    return found or [passed(check, group, all_good_value, expected)]


def group(subjects: Sequence[str], noun: str) -> str:
    """The one subject, or how many: ``nic:eth0``, ``8 GPUs``."""
    return subjects[0] if len(subjects) == 1 else plural(len(subjects), noun)


def plural(count: int, noun: str) -> str:
    """``8 GPUs``, ``1 GPU``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _short(result: CheckResult) -> str:
    subject = "" if result.subject == NODE else f" {result.subject}"
    expected = f" (expected {result.expected})" if result.expected else ""
    return f"{result.check}{subject}: {result.value}{expected}"
