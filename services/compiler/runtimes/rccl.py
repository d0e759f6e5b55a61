"""RCCL (ROCm/rccl), whose MSCCL interpreter is the executor's parser with smaller fixed limits.

Facts read from ROCm/rccl@0cbce2a7571c907554199fad7e905f16ec0a565c (2024-10-24); each line below cites its
source. The parser src/misc/msccl/msccl_parser.cc is the executor's line for line (one added line at 576).
"""
from __future__ import annotations

from .profile import STEP_TYPES, RuntimeProfile

__all__ = ["RCCL"]

RCCL = RuntimeProfile(
    name="rccl",
    title="RCCL's built-in MSCCL (ROCm/rccl)",
    source="ROCm/rccl@0cbce2a7",
    # src/misc/msccl/msccl_parser.cc:335-373
    collectives={"allgather": "allgather", "reducescatter": "reducescatter", "allreduce": "allreduce",
                 "alltoall": "alltoall", "reduce": "reduce", "broadcast": "broadcast"},
    step_types=STEP_TYPES,                  # msccl_parser.cc:499-543
    # msccl_parser.cc:315-389
    algo_required=("nchunksperloop", "nchannels", "ngpus", "proto", "coll", "minBytes", "maxBytes", "inplace",
                   "outofplace"),
    algo_written=("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                  "minBytes", "maxBytes"),
    reads_outofplace=True,                  # msccl_parser.cc:387-389; msccl_lifecycle.cc:338
    # src/include/msccl/msccl_struct.h:16 (#define MSCCL_MAX_NUM_STEPS 64, fixed), msccl_parser.cc:485
    max_steps=64,
    # src/include/msccl/msccl_struct.h:18 (#define MSCCL_MAX_NUM_THREAD_BLOCKS 64), msccl_parser.cc:421
    max_tbs=64,
    # src/include/device.h:65 (MAXCHANNELS 128), msccl_parser.cc:449; a file needing more channels than
    # NCCL_MAX_NCHANNELS is dropped (msccl_lifecycle.cc:129-134, 187-193)
    max_channels=128,
    max_bytes_zero_unbounded=True,          # msccl_lifecycle.cc:334 (m.maxBytes == 0 || nBytes <= m.maxBytes)
    max_bytes_inclusive=True,
    default_max_bytes=None,                 # msccl_parser.cc:380
    max_algorithms=1024,                    # msccl_struct.h:21 (MSCCL_MAX_NUM_ALGOS 1024)
    io_chunks_checked=False,                # msccl_parser.cc:401-408
    comm_count_min=0,                       # msccl_parser.cc:577
    scratch_from_max_bytes=False,
    # msccl_struct.h:58-59 (int8 dependentBid, int16 dependentStep), :19 (MSCCL_MAX_COUNT 72), :17 (32 tbs per
    # channel), :44-45 (int16 offsets), :20 (MSCCL_MAX_REDUCE_FUSION 16); src/include/msccl/msccl_parser.h:20-23
    # (MAX_STR_LEN 255, MAX_ATTR_COUNT 16, MAX_SUBS 1024, MAX_NODES 4096); src/include/device.h:32 (NCCL_STEPS 8);
    # msccl_parser.cc:613-620 (nop dependency chains)
    loading=(
        "Copy the file into the algorithm directory: $MSCCL_ALGO_DIR, else msccl-algorithms/ next to "
        "librccl.so, else ../share/rccl/msccl-algorithms (src/misc/msccl/msccl_lifecycle.cc:112-175).",
        "RCCL_MSCCL_ENABLE=1 is the default (msccl_lifecycle.cc:29, RCCL_PARAM prefixes RCCL_); outside the "
        "machine models that enable MSCCL (MI300X) also set RCCL_MSCCL_FORCE_ENABLE=1 "
        "(msccl_lifecycle.cc:30, 353-357).",
        "Files are read in directory order (readdir, not sorted: msccl_lifecycle.cc:177-185), so give files "
        "of one collective disjoint size windows.",
    ),
)
