"""GPU device profiles for multi-GPU hosts (docs/training.md): HBM capacity and bandwidth, dense peak FLOP/s per
precision, and the scale-up (NVLink through NVSwitch) bandwidth per GPU, from NVIDIA's public datasheets.

Figures (dense, i.e. without the 2:4 structured-sparsity doubling the datasheets also quote):
- A100 SXM4 80GB (NVIDIA A100 Tensor Core GPU datasheet): HBM2e 80 GB at 2,039 GB/s; TF32 156, BF16/FP16
  312 TFLOP/s; no FP8; NVLink 3 600 GB/s per GPU (both directions together: 300 GB/s each way).
- H100 SXM5 80GB (NVIDIA H100 Tensor Core GPU datasheet): HBM3 80 GB at 3.35 TB/s; TF32 494.5, BF16 989.5,
  FP8 1,979 TFLOP/s (the datasheet's 989/1,979/3,958 "with sparsity" halved); NVLink 4 900 GB/s (450 each way).
- H200 SXM 141GB (NVIDIA H200 Tensor Core GPU datasheet): HBM3e 141 GB at 4.8 TB/s; compute as the H100
  SXM5; NVLink 4 900 GB/s.
- B200 (NVIDIA HGX B200 / DGX B200 datasheets: per 8-GPU system 1,440 GB HBM3e at 64 TB/s, FP8 72 PFLOP/s
  and BF16 36 PFLOP/s with sparsity, NVLink 5 1.8 TB/s per GPU): per GPU 180 GB at 8 TB/s, TF32 1,125,
  BF16 2,250, FP8 4,500 TFLOP/s dense; 1.8 TB/s NVLink (900 GB/s each way).

`efficiency` is the fraction of the dense peak the training kernels reach (matrix products at the
model's shapes, plus what the FLOP count leaves out: normalisations, activations, softmax, optimizer).
It is not a datasheet figure; `bench.training` shows how it was set: for the A100 from Narayanan et al.
(SC'21), see `A100_EFFICIENCY_SOURCE`. The scale-up domain's per-step latency (`nvlink_alpha_s`) is an
assumption of a few microseconds per NCCL step inside a host, stated with the profile.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["A100_EFFICIENCY_SOURCE", "GPU_PROFILES", "GpuProfile", "PRECISIONS", "gpu_profile"]

PRECISIONS = ("tf32", "bf16", "fp8")
GB = 1e9

A100_EFFICIENCY_SOURCE = (
    "fitted to Narayanan et al., SC'21, Table 1, 1008B row: 163 TFLOP/s per A100 (52 % of 312) with "
    "tp=8, pp=64, 3072 GPUs, batch 3072, full recompute; bench.training reproduces the fit")


class GpuProfile(BaseModel):
    """One GPU model: memory, dense peaks per precision, scale-up bandwidth; `efficiency` as in the module."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=100)
    hbm_bytes: float = Field(gt=0, le=1e14)
    hbm_Bps: float = Field(gt=0, le=1e15)
    peak_flops: dict[str, float] = Field(description="dense peak FLOP/s per precision (tf32, bf16, fp8)")
    nvlink_Bps: float = Field(gt=0, le=1e14, description="scale-up bandwidth per GPU, one direction")
    nvlink_alpha_s: float = Field(default=3e-6, ge=0, le=1.0, description="scale-up latency per step")
    efficiency: float = Field(default=0.5, gt=0, le=1)
    source: str = Field(default="", max_length=2000)

    def peak(self, precision: str = "bf16") -> float:
        if precision not in self.peak_flops:
            raise ValueError(f"{self.name} has no {precision} peak (has {', '.join(self.peak_flops)})")
        return self.peak_flops[precision]

    def seconds(self, flops: float, precision: str = "bf16") -> float:
        return flops / (self.peak(precision) * self.efficiency)


GPU_PROFILES: dict[str, GpuProfile] = {p.name: p for p in [
    GpuProfile(name="a100", hbm_bytes=80 * GB, hbm_Bps=2039 * GB,
               peak_flops={"tf32": 156e12, "bf16": 312e12}, nvlink_Bps=300 * GB, efficiency=0.586,
               source="NVIDIA A100 SXM4 80GB datasheet; efficiency " + A100_EFFICIENCY_SOURCE),
    GpuProfile(name="h100", hbm_bytes=80 * GB, hbm_Bps=3350 * GB,
               peak_flops={"tf32": 494.5e12, "bf16": 989.5e12, "fp8": 1979e12}, nvlink_Bps=450 * GB,
               efficiency=0.5, source="NVIDIA H100 SXM5 datasheet; efficiency 0.5: Llama 3 (Dubey et al. 2024, "
                                      "Table 4) reports 38-43 % BF16 MFU on 16K H100s, kernels above it"),
    GpuProfile(name="h200", hbm_bytes=141 * GB, hbm_Bps=4800 * GB,
               peak_flops={"tf32": 494.5e12, "bf16": 989.5e12, "fp8": 1979e12}, nvlink_Bps=450 * GB,
               efficiency=0.5, source="NVIDIA H200 SXM datasheet; efficiency as the H100"),
    GpuProfile(name="b200", hbm_bytes=180 * GB, hbm_Bps=8000 * GB,
               peak_flops={"tf32": 1125e12, "bf16": 2250e12, "fp8": 4500e12}, nvlink_Bps=900 * GB,
               efficiency=0.5, source="NVIDIA HGX/DGX B200 datasheets (per-system figures / 8, sparsity halved); "
                                      "efficiency as the H100 (no published large-scale MFU)"),
]}


def gpu_profile(name: str) -> GpuProfile:
    key = name.lower()
    if key not in GPU_PROFILES:
        raise ValueError(f"unknown device {name!r}; known: {', '.join(GPU_PROFILES)}")
    return GPU_PROFILES[key]
