"""``nodeagent diag``: is this node healthy, and is it what was rented?

Exit status 0 healthy (warnings allowed), 1 unhealthy (a check failed), 2 could not run (a bad
flag, an unreadable profile, or diag itself broke): a Slurm prolog or an init container can act
on it without reading the output.
"""

from __future__ import annotations

import os
import sys

import click

from nodeagent.agent.cli.options import root_dir as readable_dir
from nodeagent.agent.diag.probe import ProbeOptions
from nodeagent.agent.diag.profile import (
    Profile,
    ProfileError,
    builtin_profiles,
    load_profile,
    parse_address,
    with_overrides,
)
from nodeagent.agent.diag.render import render_json, render_table
from nodeagent.agent.diag.run import DiagOptions, run_diag
from nodeagent.agent.sources import Roots
from nodeagent.core.settings.readers import link_rate

_MIB = 1024 * 1024


def _rate(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    """Through the one link-rate setting parser (core/settings/readers.py), as a profile's speeds."""
    if value is None:
        return None
    where = "--expect-nic-speed"
    return link_rate(value, where, lambda message: click.BadParameter(message.removeprefix(f"{where}: ")))


def _address(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return parse_address(value, "--collector")
    except ProfileError as err:
        raise click.BadParameter(str(err).removeprefix("--collector: "), param_hint="--collector") from err


@click.command("diag")
@click.option("--profile", "profile_spec", metavar="NAME|PATH", help="Expectations: a built-in profile or a TOML file.")
@click.option("--list-profiles", is_flag=True, help="List the built-in profiles and exit.")
@click.option("--expect-gpus", type=click.IntRange(min=0), metavar="N", help="GPUs the node must have.")
@click.option(
    "--no-gpu", is_flag=True,
    help="This node has no GPUs (same as --expect-gpus 0): without it, a node without the NVIDIA driver fails.",
)  # fmt: skip
@click.option("--expect-nvlinks", type=click.IntRange(min=0), metavar="N", help="Active NVLink links per GPU.")
@click.option("--expect-nic-speed", metavar="RATE", callback=_rate, help="Link speed of the data NIC, e.g. 50G.")
@click.option("--expect-mount", multiple=True, metavar="PATH", help="A mount that must be present. Repeatable.")
@click.option("--collector", metavar="HOST:PORT", callback=_address, help="Check this collector answers (gRPC health).")
@click.option("--procfs", default="/proc", show_default=True, callback=readable_dir("--procfs"), help="procfs root.")
@click.option("--sysfs", default="/sys", show_default=True, callback=readable_dir("--sysfs"), help="sysfs root.")
@click.option(
    "--kernel-log",
    type=click.Path(exists=True, dir_okay=False, readable=True),
    help="Read Xids from this file (saved dmesg output) instead of /dev/kmsg or dmesg.",
)
@click.option(
    "--window",
    type=click.FloatRange(min=0, max=60),
    default=1.0,
    show_default=True,
    help="Seconds between the two samples in which error counters must not grow.",
)
@click.option("--json", "as_json", is_flag=True, help="The results as one JSON document.")
@click.option("--probe", is_flag=True, help="Also measure the dataset volume's read throughput and IOPS.")
@click.option(
    "--probe-path",
    type=click.Path(exists=True, file_okay=False),
    help="Where to probe (default: the profile's [storage] dataset, else its first mount).",
)
@click.option(
    "--probe-seconds", type=click.FloatRange(min=0.1, max=30), default=2.0, show_default=True, help="Per phase."
)
@click.option(
    "--probe-size-mib", type=click.IntRange(min=16, max=65536), default=256, show_default=True, help="Probe file size."
)
@click.option(
    "--probe-queue-depth",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Random reads in flight.",
)
@click.pass_context
def diag_command(
    ctx: click.Context,
    profile_spec: str | None,
    list_profiles: bool,
    expect_gpus: int | None,
    no_gpu: bool,
    expect_nvlinks: int | None,
    expect_nic_speed: float | None,
    expect_mount: tuple[str, ...],
    collector: str | None,
    procfs: str,
    sysfs: str,
    kernel_log: str | None,
    window: float,
    as_json: bool,
    probe: bool,
    probe_path: str | None,
    probe_seconds: float,
    probe_size_mib: int,
    probe_queue_depth: int,
) -> None:
    """Check this node's health and that it is what was rented: PASS, WARN, FAIL or SKIP per check.

    Exit status: 0 healthy (warnings allowed), 1 unhealthy, 2 could not run."""
    if list_profiles:
        for name, description in builtin_profiles().items():
            click.echo(f"{name:<22} {description}")
        return
    profile = _profile(profile_spec, expect_gpus, no_gpu, expect_nvlinks, expect_nic_speed, expect_mount, collector)
    probe_options = (
        _probe_options(probe_path, profile, probe_seconds, probe_size_mib, probe_queue_depth) if probe else None
    )
    options = DiagOptions(
        profile=profile,
        roots=Roots(procfs=procfs, sysfs=sysfs),
        window_seconds=window,
        kernel_log_path=kernel_log,
        probe=probe_options,
    )
    try:
        report = run_diag(options)
    except Exception as err:  # diag broken is "could not run" (2), never "unhealthy" (1)
        raise click.ClickException(f"diag could not run: {type(err).__name__}: {err}") from err
    if as_json:
        sys.stdout.write(render_json(report))
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        sys.stdout.write(render_table(report, colour=colour))
    sys.stdout.flush()
    ctx.exit(report.exit_code)


def _profile(
    profile_spec: str | None, expect_gpus: int | None, no_gpu: bool, expect_nvlinks: int | None,
    expect_nic_speed: float | None, expect_mount: tuple[str, ...], collector: str | None,
) -> Profile:  # fmt: skip
    """The profile asked for (the empty one without ``--profile``), the ``--expect-*`` options over it."""
    if no_gpu:
        if expect_gpus:
            raise click.UsageError(f"--no-gpu contradicts --expect-gpus {expect_gpus}")
        expect_gpus = 0
    try:
        profile = load_profile(profile_spec) if profile_spec is not None else Profile()
    except ProfileError as err:
        raise click.UsageError(str(err)) from err
    return with_overrides(
        profile,
        gpus=expect_gpus,
        nvlinks_per_gpu=expect_nvlinks,
        nic_speed_bytes_per_second=expect_nic_speed,
        mounts=expect_mount,
        collector=collector,
    )


def _probe_options(
    probe_path: str | None, profile: Profile, probe_seconds: float, probe_size_mib: int, probe_queue_depth: int
) -> ProbeOptions:
    """Where and how ``--probe`` reads: ``--probe-path``, else the profile's dataset, else its first mount."""
    where = probe_path or profile.storage.dataset or next(iter(profile.storage.mounts), None)
    if where is None:
        raise click.UsageError("--probe needs --probe-path PATH (or [storage] dataset or mounts in the profile)")
    return ProbeOptions(where, probe_seconds, probe_size_mib * _MIB, probe_queue_depth)
