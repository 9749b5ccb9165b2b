"""Run a command under the system call filters a systemd unit would install, without systemd.

    python -m tests.syscall_sandbox [--allow @system-service] [--deny @privileged]
                                    [--memory-deny-write-execute] -- COMMAND [ARGS...]

The filters are built the way systemd 252 builds them, through libseccomp (loaded with ctypes,
no binding to compile), and survive ``execve`` into COMMAND:

- ``SystemCallFilter=@GROUP`` (``--allow``) and ``SystemCallFilter=~@GROUP`` (``--deny``): an
  allow list, every other call failing with EPERM (``SystemCallErrorNumber=EPERM``). The group
  contents come from ``systemd-analyze syscall-filter`` of the systemd on this machine.
- ``MemoryDenyWriteExecute=yes``: mmap with PROT_WRITE|PROT_EXEC, mprotect/pkey_mprotect with
  PROT_EXEC and shmat with SHM_EXEC fail with EPERM (systemd.exec(5)).

The kernel stacks seccomp filters and the most restrictive answer wins, as under systemd, which
also installs them as separate filters.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import mmap
import os
import subprocess
import sys
from pathlib import Path

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
SHM_EXEC = 0o100000


def scmp_act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class ArgCmp(ctypes.Structure):
    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


class SeccompUnavailable(RuntimeError):
    """libseccomp cannot be loaded here."""


def load_libseccomp() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as err:
        raise SeccompUnavailable(f"libseccomp not loadable: {err}") from err
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ArgCmp),
    ]
    return lib


def syscall_groups() -> dict[str, list[str]]:
    """Every group systemd knows, as ``systemd-analyze syscall-filter`` prints them."""
    text = subprocess.run(
        ["systemd-analyze", "syscall-filter"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    groups: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not line.startswith(" "):
            current = groups.setdefault(stripped, [])
        elif current is not None:
            current.append(stripped)
    return groups


def expand(name: str, groups: dict[str, list[str]]) -> set[str]:
    if not name.startswith("@"):
        return {name}
    members: set[str] = set()
    for item in groups[name]:
        members |= expand(item, groups)
    return members


def install_allow_list(lib: ctypes.CDLL, names: set[str]) -> None:
    ctx = lib.seccomp_init(scmp_act_errno(errno.EPERM))
    try:
        for name in sorted(names):
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:  # not a system call on this architecture (e.g. setuid32 on x86-64)
                continue
            _check(lib.seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, number, 0, None), f"allow {name}")
        _check(lib.seccomp_load(ctx), "load allow list")
    finally:
        lib.seccomp_release(ctx)


def install_memory_deny_write_execute(lib: ctypes.CDLL) -> None:
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    write_exec = mmap.PROT_WRITE | mmap.PROT_EXEC
    rules = [
        ("mmap", 2, write_exec, write_exec),
        ("mprotect", 2, mmap.PROT_EXEC, mmap.PROT_EXEC),
        ("pkey_mprotect", 2, mmap.PROT_EXEC, mmap.PROT_EXEC),
        ("shmat", 2, SHM_EXEC, SHM_EXEC),
    ]
    try:
        for name, arg, mask, value in rules:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:
                continue
            cmp = ArgCmp(arg=arg, op=SCMP_CMP_MASKED_EQ, datum_a=mask, datum_b=value)
            _check(
                lib.seccomp_rule_add_array(ctx, scmp_act_errno(errno.EPERM), number, 1, ctypes.byref(cmp)),
                f"deny {name}",
            )
        _check(lib.seccomp_load(ctx), "load MemoryDenyWriteExecute filter")
    finally:
        lib.seccomp_release(ctx)


def _check(result: int, what: str) -> None:
    if result < 0:
        raise OSError(-result, f"seccomp: {what}: {os.strerror(-result)}")


def unit_directives(unit: Path) -> dict[str, list[str]]:
    """``Key=value`` lines of a unit file, every value of repeated keys in order."""
    values: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[", " ")):
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def unit_filter_args(unit: Path) -> list[str]:
    """This module's options for a unit's SystemCallFilter= and MemoryDenyWriteExecute= lines."""
    directives = unit_directives(unit)
    args: list[str] = []
    for line in directives.get("SystemCallFilter", []):
        deny = line.startswith("~")
        for name in line.removeprefix("~").split():
            args += ["--deny" if deny else "--allow", name]
    if directives.get("MemoryDenyWriteExecute") == ["yes"]:
        args.append("--memory-deny-write-execute")
    return args


def run_under_unit_filters(unit: Path, command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``command`` under ``unit``'s system call filters; its output is captured."""
    sandbox = [sys.executable, "-m", "tests.syscall_sandbox", *unit_filter_args(unit), "--"]
    repo = Path(__file__).resolve().parents[1]
    return subprocess.run(
        [*sandbox, *command], cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow", action="append", default=[], help="SystemCallFilter=GROUP-or-call")
    parser.add_argument("--deny", action="append", default=[], help="SystemCallFilter=~GROUP-or-call")
    parser.add_argument("--memory-deny-write-execute", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    lib = load_libseccomp()
    if args.memory_deny_write_execute:
        install_memory_deny_write_execute(lib)
    if args.allow:
        groups = syscall_groups()
        allowed: set[str] = set()
        for name in args.allow:
            allowed |= expand(name, groups)
        for name in args.deny:
            allowed -= expand(name, groups)
        install_allow_list(lib, allowed)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
