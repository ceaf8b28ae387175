"""The machine and software the figures of ``conveyor bench`` were measured
on: the command's report and ``autotune`` both read them here."""

from __future__ import annotations

import os
import platform
from typing import Any, Optional

__all__ = ["cores", "machine_info", "version"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gb() -> Optional[float]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def cores() -> int:
    """The CPUs this process may use (affinity and cgroup quota), as the engine counts them."""
    from conveyor import _conveyor

    return _conveyor.default_cpu_threads()


def version(package: str) -> Optional[str]:
    """The installed version of the distribution ``package``, or None."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(package)
    except PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """The machine and software the figures were measured on."""
    return {
        "cores": cores(),
        "cpu": _cpu_model(),
        "ram_gb": _ram_gb(),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{
            name: version(name)
            for name in ("torch", "torchvision", "pillow", "numpy", "nvidia-dali-cuda120", "spdl", "ffcv")
        },
    }
