"""The runtimes a compiled file is for, named once: the three that read MSCCL XML (their profiles are this
package's modules) and our CPU format, oneCCL (docs/oneccl-xml.md). The CLI's --runtime, the API's
`?runtime=` and a plan's `runtimes` take these values; `Runtime` is a `str`, so a member compares equal to its
name and serialises as it.

>>> Runtime("rccl") is Runtime.RCCL, Runtime.ONECCL.file_format, Runtime.LEGACY.file_format
(True, <Format.ONECCL: 'oneccl'>, <Format.MSCCL: 'msccl'>)
>>> [r.value for r in MSCCL_RUNTIMES]
['executor', 'rccl', 'legacy']
"""
from __future__ import annotations

from enum import Enum

__all__ = ["DEFAULT_RUNTIME", "Format", "MSCCL_RUNTIMES", "Runtime"]


class Format(str, Enum):
    """The XML a file is written in."""

    MSCCL = "msccl"
    ONECCL = "oneccl"


class Runtime(str, Enum):
    """executor: Azure/msccl-executor-nccl; rccl: ROCm/rccl; legacy: microsoft/msccl; oneccl: our CPU format."""

    EXECUTOR = "executor"
    RCCL = "rccl"
    LEGACY = "legacy"
    ONECCL = "oneccl"

    @property
    def file_format(self) -> Format:
        return Format.ONECCL if self is Runtime.ONECCL else Format.MSCCL

    def __str__(self) -> str:
        return self.value


MSCCL_RUNTIMES = (Runtime.EXECUTOR, Runtime.RCCL, Runtime.LEGACY)
DEFAULT_RUNTIME = Runtime.EXECUTOR
