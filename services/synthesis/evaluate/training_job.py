"""Model descriptions for training-iteration simulation (paper section 8.3 / App. A.4).

A model is its layers in forward order. Each layer has the bytes of its data-parallel gradients (allreduced
over all nodes), its forward and backward compute time on one node (seconds, or FLOPs and a device profile:
time = FLOPs / (peak FLOP/s * efficiency)), and, for an expert-parallel mixture-of-experts layer, the bytes
of its tokens each node sends to the experts (`moe_tokens_bytes`: an all-to-all of that size runs before
and after the layer, in forward and in backward). `expert_parallel` is the number of nodes the experts are
sharded over (an expert-parallel group; default all N, the paper's setting, where expert parameters live on
their node and are never allreduced); with fewer, N must be a multiple of it, the groups hold replicas of
every expert (expert-data parallelism, DeepSpeed-MoE: Rajbhandari et al. ICML'22 section 4.1), the all-to-all
runs inside each group and a node's share of `expert_params_bytes` (1/expert_parallel of it) is allreduced
over the N/expert_parallel replicas. DDP bucket capacities to try default to 1 MB, 10 MB, 100 MB and 1 GB
(MB = 2^20 bytes, as in the paper's tables).

The file form (JSON) is exactly this schema, e.g.::

    {"name": "tiny", "layers": [{"name": "fc", "params_bytes": 4096, "forward_s": 0.001, "backward_s": 0.002},
                                {"name": "moe", "params_bytes": 512, "forward_s": 0.001, "backward_s": 0.002,
                                 "moe_tokens_bytes": 1048576}],
     "buckets_bytes": [1048576]}

Unknown fields are rejected, every size is bounded, and a layer gives either seconds or FLOPs (then the
model needs a `device`: a catalogued name such as "a100" or {"name", "peak_flops", "efficiency"}).
"""
from __future__ import annotations

import json

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from services.synthesis.evaluate.devices import gpu_profile

__all__ = ["DEFAULT_BUCKETS_BYTES", "DEVICES", "DeviceProfile", "Layer", "MAX_BUCKETS", "ModelSpec",
           "ModelSpecError", "parse_model_spec", "MAX_LAYERS"]

MB = 1 << 20
DEFAULT_BUCKETS_BYTES = (MB, 10 * MB, 100 * MB, 1024 * MB)
MAX_LAYERS = 100_000
MAX_BUCKETS = 32
MAX_BYTES = 1 << 50            # 1 PiB per layer or bucket
MAX_SECONDS = 1e5
MAX_FLOPS = 1e22


class DeviceProfile(BaseModel):
    """A device's dense peak FLOP/s and the fraction of it the model's kernels achieve."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=100)
    peak_flops: float = Field(gt=0, le=1e18, description="dense peak FLOP/s at the training precision")
    efficiency: float = Field(gt=0, le=1, description="achieved fraction of the peak (model FLOPs utilisation)")
    source: str = Field(default="", max_length=2000)

    def seconds(self, flops: float) -> float:
        return flops / (self.peak_flops * self.efficiency)


# Peaks: the hybrid model's calibrated GPU profiles (`devices.GPU_PROFILES`: the datasheets' dense BF16 peak,
# 312 and 989.5 TFLOP/s), the same quantity, so both models read one table. Efficiencies: not the hybrid model's
# e(h). That curve is the fraction of the peak on the FLOPs a transformer layer of hidden size h executes (solved
# from Megatron-LM and Llama 3 runs); this simulator's layers are any architecture's (ResNet-50, DLRM, BERT, GPT,
# Switch: `model_catalog`), given in model FLOPs with no hidden size, so it keeps one model FLOPs utilisation per
# device: Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
# (SC'21): 163 TFLOP/s per A100 for GPT-3 175B (52 % of peak); Llama 3 (Dubey et al. 2024, Table 4): 38-43 %
# BF16 MFU on H100 (docs/training.md, "One accelerator per node").
def _simulator_device(name: str, efficiency: float, why: str) -> DeviceProfile:
    gpu = gpu_profile(name)
    return DeviceProfile(name=name, peak_flops=gpu.peak("bf16"), efficiency=efficiency,
                         source=f"{gpu.source.split(';')[0]}, BF16 dense {gpu.peak('bf16') / 1e12:g} TFLOP/s "
                                f"(devices.GPU_PROFILES); MFU {efficiency:g} ({why})")


DEVICES = {
    "a100": _simulator_device("a100", 0.5, "Megatron-LM, SC'21: 52 %"),
    "h100": _simulator_device("h100", 0.4, "Llama 3 paper: 38-43 %"),
}


class Layer(BaseModel):
    """One layer in forward order (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=200)
    params_bytes: int = Field(ge=0, le=MAX_BYTES, description="data-parallel gradient bytes (allreduced)")
    forward_s: float | None = Field(default=None, ge=0, le=MAX_SECONDS)
    backward_s: float | None = Field(default=None, ge=0, le=MAX_SECONDS)
    forward_flops: float | None = Field(default=None, ge=0, le=MAX_FLOPS)
    backward_flops: float | None = Field(default=None, ge=0, le=MAX_FLOPS)
    moe_tokens_bytes: int | None = Field(default=None, gt=0, le=MAX_BYTES,
                                         description="bytes per node sent to the experts (MoE layers only)")
    expert_params_bytes: int = Field(default=0, ge=0, le=MAX_BYTES,
                                     description="expert-parallel parameter bytes of all experts (not allreduced)")

    @model_validator(mode="after")
    def _one_compute_form(self) -> "Layer":
        for phase in ("forward", "backward"):
            given = [getattr(self, f"{phase}_s") is not None, getattr(self, f"{phase}_flops") is not None]
            if sum(given) != 1:
                raise ValueError(f"give exactly one of {phase}_s and {phase}_flops")
        return self

    @property
    def is_moe(self) -> bool:
        return self.moe_tokens_bytes is not None


class ModelSpec(BaseModel):
    """A training job's model: layers in forward order, DDP bucket capacities, optional device profile."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=200)
    layers: list[Layer] = Field(min_length=1, max_length=MAX_LAYERS)
    buckets_bytes: list[int] = Field(default=list(DEFAULT_BUCKETS_BYTES), min_length=1, max_length=MAX_BUCKETS)
    device: str | DeviceProfile | None = None
    expert_parallel: int | None = Field(default=None, ge=1, le=1 << 20,
                                        description="nodes per expert-parallel group (a divisor of N; default N)")

    @field_validator("buckets_bytes")
    @classmethod
    def _buckets(cls, v: list[int]) -> list[int]:
        bad = [b for b in v if not 0 < b <= MAX_BYTES]
        if bad:
            raise ValueError(f"bucket capacities must be between 1 and {MAX_BYTES} bytes, got {bad[0]}")
        return sorted(set(v))

    @field_validator("device")
    @classmethod
    def _device(cls, v):
        if isinstance(v, str) and v.lower() not in DEVICES:
            raise ValueError(f"unknown device {v!r}; known: {', '.join(DEVICES)} (or give a profile object)")
        return v

    @model_validator(mode="after")
    def _device_when_flops(self) -> "ModelSpec":
        if self.device is None and any(l.forward_flops is not None or l.backward_flops is not None
                                       for l in self.layers):
            raise ValueError("layers given in FLOPs need a device profile (`device`)")
        return self

    @property
    def profile(self) -> DeviceProfile | None:
        return DEVICES[self.device.lower()] if isinstance(self.device, str) else self.device

    def compute_times(self) -> tuple[np.ndarray, np.ndarray]:
        """Forward and backward seconds of every layer (FLOPs converted with the device profile)."""
        dev = self.profile
        fwd = [l.forward_s if l.forward_s is not None else dev.seconds(l.forward_flops) for l in self.layers]
        bwd = [l.backward_s if l.backward_s is not None else dev.seconds(l.backward_flops) for l in self.layers]
        return np.asarray(fwd, dtype=np.float64), np.asarray(bwd, dtype=np.float64)

    @property
    def gradient_bytes(self) -> int:
        return sum(l.params_bytes for l in self.layers)

    def expert_group(self, nodes: int) -> int:
        """The expert-parallel group size on `nodes` nodes (`expert_parallel`, default all of them); ValueError
        when it does not tile the nodes."""
        ep = self.expert_parallel or nodes
        if ep > nodes or nodes % ep:
            raise ValueError(f"expert_parallel={ep} must divide the {nodes} nodes (groups of {ep} nodes, each "
                             "holding every expert once)")
        return ep

    @property
    def parameter_bytes(self) -> int:
        """All parameter bytes: data-parallel gradients plus expert-parallel parameters."""
        return sum(l.params_bytes + l.expert_params_bytes for l in self.layers)


class ModelSpecError(ValueError):
    """A model description that does not parse; `errors` lists (location, message) pairs."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{loc}: {msg}" if loc else msg for loc, msg in errors))


def parse_model_spec(data: str | bytes | dict) -> ModelSpec:
    """A `ModelSpec` from its JSON text or a decoded object; ModelSpecError names each bad field.

    >>> spec = parse_model_spec('{"name": "m", "layers": [{"name": "a", "params_bytes": 8, '
    ...                         '"forward_s": 0.5, "backward_s": 1.0}]}')
    >>> spec.gradient_bytes, spec.buckets_bytes[:2]
    (8, [1048576, 10485760])
    >>> parse_model_spec('{"name": "m", "layers": []}')
    Traceback (most recent call last):
    ...
    services.synthesis.evaluate.training_job.ModelSpecError: layers: List should have at least 1 item after validation, not 0
    """
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelSpecError([("", f"not valid JSON: {exc}")]) from None
    if not isinstance(data, dict):
        raise ModelSpecError([("", "a model description is a JSON object")])
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        raise ModelSpecError([(".".join(str(p) for p in e["loc"]), e["msg"].removeprefix("Value error, "))
                              for e in exc.errors()]) from None
