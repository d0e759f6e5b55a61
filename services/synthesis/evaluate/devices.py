"""GPU device profiles for multi-GPU hosts (docs/training.md): HBM capacity and bandwidth, dense peak FLOP/s per
precision, and the scale-up (NVLink through NVSwitch) bandwidth per GPU, from NVIDIA's public datasheets.

Figures (dense, i.e. without the 2:4 structured-sparsity doubling the datasheets also quote):
HBM capacities are binary gigabytes (GiB): the datasheets' "80 GB" is the 81,920 MiB CUDA reports for an A100 or
H100 80GB (five 16 GiB HBM stacks); the H200's 141 and the B200's 180 likewise.
- A100 SXM4 80GB (NVIDIA A100 Tensor Core GPU datasheet): HBM2e 80 GB at 2,039 GB/s; TF32 156, BF16/FP16
  312 TFLOP/s; no FP8; NVLink 3 600 GB/s per GPU (both directions together: 300 GB/s each way).
- H100 SXM5 80GB (NVIDIA H100 Tensor Core GPU datasheet): HBM3 80 GB at 3.35 TB/s; TF32 494.5, BF16 989.5,
  FP8 1,979 TFLOP/s (the datasheet's 989/1,979/3,958 "with sparsity" halved); NVLink 4 900 GB/s (450 each way).
- H200 SXM 141GB (NVIDIA H200 Tensor Core GPU datasheet): HBM3e 141 GB at 4.8 TB/s; compute as the H100
  SXM5; NVLink 4 900 GB/s.
- B200 (NVIDIA HGX B200 / DGX B200 datasheets: per 8-GPU system 1,440 GB HBM3e at 64 TB/s, FP8 72 PFLOP/s
  and BF16 36 PFLOP/s with sparsity, NVLink 5 1.8 TB/s per GPU): per GPU 180 GB at 8 TB/s, TF32 1,125,
  BF16 2,250, FP8 4,500 TFLOP/s dense; 1.8 TB/s NVLink (900 GB/s each way).

Efficiency by GEMM size. The fraction of the dense peak the training kernels reach on the FLOPs counted
(matrix products and attention scores) grows with the hidden size h, which every matrix product of a layer has
as a dimension and which sets how much memory-bound work (normalisations, activations, softmax, dropout,
optimizer: O(s b h) bytes per layer) rides on the O(s b h^2) FLOPs of the products:
    e(h) = e_max h / (h + h0)                     (`GpuProfile.efficiency_at`)
i.e. the time of a layer is FLOPs / (peak e_max) (1 + h0 / h): the products at e_max plus memory-bound work
worth h0/h of them. Calibration points (docs/training.md, bench.training prints the fit):
- A100: (e_max, h0) solved from two published runs, Narayanan et al. SC'21 Table 1, the 1.7B row (h 2304,
  137 TFLOP/s) and the 1008B row (h 25600, 163 TFLOP/s); every other A100 row is a prediction.
- H100: h0 by the roofline from the A100's: the memory-bound part takes time in proportion to
  peak / HBM bandwidth, so h0_dev = h0_A100 (peak_dev / peak_A100) / (HBM_dev / HBM_A100); e_max solved
  from one published run, Dubey et al. 2024 ("The Llama 3 Herd of Models") Table 4, 405B on 8,192 H100s
  (430 TFLOP/s per GPU).
- H200: the H100's e_max (the same GH100 die and clocks), h0 by the roofline with its 4.8 TB/s HBM.
- B200: no published large-scale run with its configuration: the H100's e_max (an assumption), h0 by
  the roofline.
The scale-up domain's per-step latency (`nvlink_alpha_s`) is an assumption of a few microseconds per NCCL step
inside a host, stated with the profile.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["A100_EFFICIENCY", "A100_EFFICIENCY_SOURCE", "GPU_PROFILES", "GpuProfile", "H100_E_MAX", "PRECISIONS",
           "gpu_profile", "roofline_h0"]

PRECISIONS = ("tf32", "bf16", "fp8")
GB = 1e9
GiB = float(1 << 30)     # HBM capacities are binary: an "80 GB" A100 or H100 reports 81,920 MiB to CUDA

# (e_max, h0) of the A100 and e_max of the H100: solved by `services.synthesis.evaluate.published_runs.calibrate`
# from the calibration rows named below (bench.training re-solves them and prints both).
A100_EFFICIENCY = (0.6055, 821.4)
H100_E_MAX = 0.6225
A100_EFFICIENCY_SOURCE = (
    "e(h) = e_max h / (h + h0) solved from Narayanan et al., SC'21, Table 1, rows 1.7B (137 TFLOP/s per A100, "
    "h 2304, tp 1, 32 GPUs) and 1008B (163 TFLOP/s, h 25600, tp 8, pp 64, 3072 GPUs); bench.training re-solves it")


def roofline_h0(peak_flops: float, hbm_Bps: float) -> float:
    """h0 of a device from the A100's: memory-bound work takes peak / HBM bandwidth as long relative to the
    matrix products (module docstring)."""
    return A100_EFFICIENCY[1] * (peak_flops / 312e12) / (hbm_Bps / (2039 * GB))


class GpuProfile(BaseModel):
    """One GPU model: memory, dense peaks per precision, scale-up bandwidth; `efficiency` as in the module."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=100)
    hbm_bytes: float = Field(gt=0, le=1e14)
    hbm_Bps: float = Field(gt=0, le=1e15)
    peak_flops: dict[str, float] = Field(description="dense peak FLOP/s per precision (tf32, bf16, fp8)")
    nvlink_Bps: float = Field(gt=0, le=1e14, description="scale-up bandwidth per GPU, one direction")
    nvlink_alpha_s: float = Field(default=3e-6, ge=0, le=1.0, description="scale-up latency per step")
    efficiency: float = Field(default=0.5, gt=0, le=1, description="e_max: the efficiency at large GEMMs")
    efficiency_h0: float = Field(default=0.0, ge=0, le=1e6, description="h0 of e(h) = e_max h / (h + h0)")
    source: str = Field(default="", max_length=2000)

    def peak(self, precision: str = "bf16") -> float:
        if precision not in self.peak_flops:
            raise ValueError(f"{self.name} has no {precision} peak (has {', '.join(self.peak_flops)})")
        return self.peak_flops[precision]

    def efficiency_at(self, hidden: int | None = None) -> float:
        """e(h) = e_max h / (h + h0) (module docstring); e_max when no hidden size is given."""
        if hidden is None or self.efficiency_h0 <= 0:
            return self.efficiency
        return self.efficiency * hidden / (hidden + self.efficiency_h0)

    def seconds(self, flops: float, precision: str = "bf16", hidden: int | None = None) -> float:
        return flops / (self.peak(precision) * self.efficiency_at(hidden))


_ROOF = "h0 by the roofline from the A100's (module docstring)"
GPU_PROFILES: dict[str, GpuProfile] = {p.name: p for p in [
    GpuProfile(name="a100", hbm_bytes=80 * GiB, hbm_Bps=2039 * GB,
               peak_flops={"tf32": 156e12, "bf16": 312e12}, nvlink_Bps=300 * GB,
               efficiency=A100_EFFICIENCY[0], efficiency_h0=A100_EFFICIENCY[1],
               source="NVIDIA A100 SXM4 80GB datasheet; efficiency " + A100_EFFICIENCY_SOURCE),
    GpuProfile(name="h100", hbm_bytes=80 * GiB, hbm_Bps=3350 * GB,
               peak_flops={"tf32": 494.5e12, "bf16": 989.5e12, "fp8": 1979e12}, nvlink_Bps=450 * GB,
               efficiency=H100_E_MAX, efficiency_h0=roofline_h0(989.5e12, 3350 * GB),
               source="NVIDIA H100 SXM5 datasheet; e_max solved from Dubey et al. 2024 (Llama 3), Table 4, 405B "
                      "on 8,192 H100s at 430 TFLOP/s per GPU; " + _ROOF),
    GpuProfile(name="h200", hbm_bytes=141 * GiB, hbm_Bps=4800 * GB,
               peak_flops={"tf32": 494.5e12, "bf16": 989.5e12, "fp8": 1979e12}, nvlink_Bps=450 * GB,
               efficiency=H100_E_MAX, efficiency_h0=roofline_h0(989.5e12, 4800 * GB),
               source="NVIDIA H200 SXM datasheet; e_max as the H100 (same die); " + _ROOF),
    GpuProfile(name="b200", hbm_bytes=180 * GiB, hbm_Bps=8000 * GB,
               peak_flops={"tf32": 1125e12, "bf16": 2250e12, "fp8": 4500e12}, nvlink_Bps=900 * GB,
               efficiency=H100_E_MAX, efficiency_h0=roofline_h0(2250e12, 8000 * GB),
               source="NVIDIA HGX/DGX B200 datasheets (per-system figures / 8, sparsity halved); e_max as the "
                      "H100 (no published large-scale run with its configuration: an assumption); " + _ROOF),
]}


def gpu_profile(name: str) -> GpuProfile:
    key = name.lower()
    if key not in GPU_PROFILES:
        raise ValueError(f"unknown device {name!r}; known: {', '.join(GPU_PROFILES)}")
    return GPU_PROFILES[key]
