"""The job roll-up's thresholds and bounds, each with its default (docs/jobs.md).

The window, its step and the persistence (``enter_steps`` of ``window_steps``) are the
detector's (``core/detector/config.py``): a straggler is named by the same "most of the window"
rule that makes a GPU starved, and the tiers (``moderate_ratio``, ``high_ratio``) are its too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class JobRollupConfig:
    # ---- comparing the job's nodes ----
    # A node stands out on a signal when its robust score (its value minus the other nodes'
    # median, over 1.4826 x their median absolute deviation) passes this (Iglewicz and Hoaglin's
    # 3.5 for the modified z-score) in the signal's direction.
    score_threshold: float = 3.5
    # The least deviation counted per signal: nodes that agree exactly (MAD 0, two nodes, a
    # throttled share of 0 everywhere) still need this spread x 1.4826 x score_threshold to stand
    # out (0.02: a node 0.10 below the others' utilization).
    busy_floor_ratio: float = 0.02
    sm_active_floor_ratio: float = 0.02
    data_wait_floor_ratio: float = 0.015
    throttled_floor_ratio: float = 0.1
    # Up to this many nodes the median and MAD are the other nodes' (leave one out, exactly: with
    # two nodes the pair's own MAD is half their gap); above, the whole job's, which one node
    # moves by at most one rank.
    exact_nodes: int = 4
    # ---- a degraded link ----
    # A NIC's or a GPU's PCIe link speed below this share of the other nodes' median.
    link_speed_ratio: float = 0.75
    # The fabric NIC's peak per-second rate over the window below this share of the others' median
    # peak, while theirs stays under link_saturated_ratio of their speed and above the floor.
    link_peak_ratio: float = 0.5
    link_saturated_ratio: float = 0.8
    link_peak_floor_bytes_per_second: float = 1e6
    # A NIC carries the collective (the fabric) when over the window the smaller of its receive
    # and transmit is at least this share of the larger (a loader's data link receives only).
    fabric_symmetry_ratio: float = 0.3
    # Time on the wire: the fabric NIC's busy share of its rating (bytes over rating over the
    # window) at least link_busy_factor x the others' median, and above it by at least
    # link_busy_excess_ratio of the time (the detector's moderate tier): each step that node spends
    # that much longer carrying the bytes every member moves, and the others wait for it.
    link_busy_factor: float = 2.0
    link_busy_excess_ratio: float = 0.05
    # Retransmits: TCP segments retransmitted over sent since the previous step at least this
    # share, and link_retransmit_factor x the others' median; counted where at least
    # link_retransmit_min_segments were sent (a quiet host's few segments say nothing).
    link_retransmit_ratio: float = 0.01
    link_retransmit_factor: float = 4.0
    link_retransmit_min_segments: int = 200
    # ---- the job ----
    # Job-wide: at least this share of the compared nodes show the same bottleneck of their own.
    job_wide_share_ratio: float = 0.9
    # The tenants of ``[tenants]``: job keys scoped by them (``collector/tenants.py``).
    tenants: frozenset[str] = frozenset()
    # A job step is judged once every node has stepped, or this share of a step after it began.
    grace_ratio: float = 0.5
    # ---- bounds ----
    # Jobs followed at once; a new job key past it is not followed (counted, logged).
    max_jobs: int = 10_000
    # Nodes followed per job; a node past it is left out of that job (noted in its verdict).
    max_nodes_per_job: int = 4096
    # Job keys taken from one report (the first ones); the rest are ignored (counted).
    max_jobs_per_node: int = 16
    # Ranks kept per node and job (for the rank checks); the count beyond is still counted.
    max_ranks_per_node: int = 1024
