"""Compile bodies: an on-demand compile of a plan's or revision's XML, queued or running.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


__all__ = ["CompileAccepted"]


class CompileAccepted(BaseModel):
    """A compile was queued (or is running): poll `url` until it answers 200 (the file) or 422 (refused)."""

    status: Literal["queued", "running"]
    collective: str
    format: str
    runtime: str
    options: str
    url: str
