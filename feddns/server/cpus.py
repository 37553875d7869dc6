"""How many CPUs this process may use: the default of ``feddns serve --workers``.

Two things bound it, as they bound a container: the CPUs the process may run on
(its affinity, ``os.sched_getaffinity``, which ``taskset`` and a cpuset set), and
the CPU time its cgroup may take per period (a Kubernetes CPU limit): cgroup v2's
``cpu.max`` (``QUOTA PERIOD``, or ``max``), cgroup v1's ``cpu.cfs_quota_us`` over
``cpu.cfs_period_us`` (-1: none). The cgroup of the process is read from
``/proc/self/cgroup`` and found under its mount in ``/proc/self/mountinfo``; each
cgroup from it up to its mount's root is read, since a parent's quota bounds its
children too. A quota counts whole CPUs, rounded down (at least one): 1.5 CPUs
give one worker, which never waits for the quota's next period, where two would
spend it in part of each period and stall for the rest.
"""

import math
import os
from pathlib import Path

PROC = Path("/proc/self")
V1, V2 = 1, 2
"""The cgroup versions."""
MOUNTINFO_FIELDS = 5
"""Fields of a mountinfo line read, of those before its optional ones (proc(5)): the root, the mount point."""


def available(proc: Path = PROC, root: Path = Path("/")) -> int:
    """CPUs this process may use: its affinity, bounded by its cgroup's CPU quota; at least 1.

    ``proc`` and ``root`` let a test give a process's files and a filesystem of its own."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = quota_cpus(proc, root)
    if quota is not None:
        count = min(count, max(1, math.floor(quota)))
    return max(1, count)


def quota_cpus(proc: Path = PROC, root: Path = Path("/")) -> float | None:
    """The CPU quota of the process's cgroups in CPUs (``None``: no quota, or no cgroup to read)."""
    try:
        groups = (proc / "cgroup").read_text().splitlines()
        mounts = (proc / "mountinfo").read_text().splitlines()
    except OSError:
        return None
    found = [q for directory in _cpu_directories(groups, mounts, root) if (q := _quota(directory)) is not None]
    return min(found) if found else None


def _cpu_directories(groups: list[str], mounts: list[str], root: Path) -> list[Path]:
    """The directories of the process's CPU cgroup and of each cgroup above it, up to its mount."""
    out = []
    for mount_root, mount_point, version in _cgroup_mounts(mounts):
        path = _group_path(groups, version)
        if path is None:
            continue
        # Inside a cgroup namespace the mount's root is the namespace's own: the path is relative to it.
        relative = os.path.relpath(path, mount_root) if path.startswith(mount_root) else "."
        top = root / mount_point.lstrip("/")
        directory = top / relative if relative != "." else top
        if not directory.is_dir():
            directory = top
        while True:
            out.append(directory)
            if directory == top:
                break
            directory = directory.parent
    return out


def _cgroup_mounts(mounts: list[str]) -> list[tuple[str, str, int]]:
    """``(root, mount point, version)`` of the cgroup2 mount and of the v1 mounts with the cpu controller."""
    out = []
    for line in mounts:
        fields, _, after = line.partition(" - ")
        parts, rest = fields.split(), after.split()
        if len(parts) < MOUNTINFO_FIELDS or len(rest) < 3:  # noqa: PLR2004 - type, source, options
            continue
        if rest[0] == "cgroup2":
            out.append((parts[3], parts[4], V2))
        elif rest[0] == "cgroup" and "cpu" in rest[2].split(","):
            out.append((parts[3], parts[4], V1))
    return out


def _group_path(groups: list[str], version: int) -> str | None:
    """The process's cgroup path for cgroup v2 (``0::/path``) or v1's cpu controller."""
    for line in groups:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if version == V2 and hierarchy == "0" and controllers == "":
            return path
        if version == V1 and "cpu" in controllers.split(","):
            return path
    return None


def _quota(directory: Path) -> float | None:
    """The quota set in one cgroup directory, in CPUs (``None``: none set there)."""
    try:
        if (directory / "cpu.max").exists():  # cgroup v2: "max 100000" or "150000 100000"
            quota, period = [*(directory / "cpu.max").read_text().split(), "100000"][:2]
            return None if quota == "max" else int(quota) / int(period)
        quota_us = int((directory / "cpu.cfs_quota_us").read_text())
        period_us = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us < 0 or period_us <= 0 else quota_us / period_us
