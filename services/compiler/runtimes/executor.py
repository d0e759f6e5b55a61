"""Azure/msccl-executor-nccl, the maintained MSCCL runtime (NCCL 2.23 with the MSCCL executor).

Facts read from Azure/msccl-executor-nccl@c6f6b36d1a4c7ae44916fcc5c8e32c95cce2ae54 (2024-12-13); each line
below cites its source.
"""
from __future__ import annotations

from .profile import STEP_TYPES, RuntimeProfile

__all__ = ["EXECUTOR"]

EXECUTOR = RuntimeProfile(
    name="executor",
    title="msccl-executor-nccl (Azure/msccl-executor-nccl)",
    source="Azure/msccl-executor-nccl@c6f6b36d",
    # src/misc/msccl/msccl_parser.cc:335-373 (coll names; reducescatter/allgather/alltoall multiply the
    # size by nranks, :348/:353/:366)
    collectives={"allgather": "allgather", "reducescatter": "reducescatter", "allreduce": "allreduce",
                 "alltoall": "alltoall", "reduce": "reduce", "broadcast": "broadcast"},
    # src/misc/msccl/msccl_parser.cc:499-543 (s r rcs rrs rrc rrcs cpy re nop; anything else fails)
    step_types=STEP_TYPES,
    # src/misc/msccl/msccl_parser.cc:315-389 (mscclXmlGetAttrInt/Str fail when the attribute is missing;
    # `name` is never read)
    algo_required=("nchunksperloop", "nchannels", "ngpus", "proto", "coll", "minBytes", "maxBytes", "inplace",
                   "outofplace"),
    algo_written=("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                  "minBytes", "maxBytes"),
    # src/misc/msccl/msccl_parser.cc:387-389; selection msccl_lifecycle.cc:339 (isInPlace ? inPlace : outOfPlace)
    reads_outofplace=True,
    # src/misc/msccl/msccl_parser.cc:485 (s >= MSCCL_MAX_NUM_STEPS fails); MSCCL_MAX_NUM_STEPS is a build
    # flag, makefiles/common.mk:19 `MSCCL_MAX_NUM_STEPS ?= 64` (override with max_steps for another build)
    max_steps=64,
    # src/include/msccl/msccl_struct.h:18 (32 x MAXCHANNELS) and device.h:65 (MAXCHANNELS 32);
    # parser.cc:421 (bid >= MSCCL_MAX_NUM_THREAD_BLOCKS fails)
    max_tbs=1024,
    # src/include/device.h:65 (MAXCHANNELS 32); parser.cc:449 accepts chan == MAXCHANNELS, then :456 indexes
    # mscclChannels[MAXCHANNELS] past its end
    max_channels=32,
    # src/misc/msccl/msccl_lifecycle.cc:335 (m.maxBytes == 0 || nBytes <= m.maxBytes) and
    # msccl_struct.h:105 ("0 for no limit")
    max_bytes_zero_unbounded=True,
    max_bytes_inclusive=True,
    default_max_bytes=None,                 # parser.cc:380 (required)
    # src/include/msccl/msccl_struct.h:21 (MSCCL_MAX_NUM_ALGOS 1024)
    max_algorithms=1024,
    io_chunks_checked=False,                # parser.cc:401-408 reads i_chunks/o_chunks without a check
    comm_count_min=0,                       # parser.cc:577 (count < 0 || count >= MSCCL_MAX_COUNT fails)
    scratch_from_max_bytes=False,           # msccl_setup.cc:68 (scratch sized per call from nBytes)
    # src/include/msccl/msccl_struct.h:58 (int8_t dependentBid), :59 (int16_t dependentStep),
    # :19 (MSCCL_MAX_COUNT 72), :17 (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL 32, parser.cc:589/602),
    # :44-45 (int16_t srcOffset/dstOffset), :20 (MSCCL_MAX_REDUCE_FUSION 16, parser.cc:636);
    # src/include/msccl/msccl_parser.h:20-23 (MAX_STR_LEN 255, MAX_ATTR_COUNT 16, MAX_SUBS 1024, MAX_NODES 4096),
    # parser.cc:169 (maxIndex == MAX_NODES fails before every node read), :195 (subs[nSubs++] unchecked),
    # :69-71 (names of 254+ characters fail), :44-49 (values copied without a bound);
    # src/include/device.h:27 (NCCL_STEPS 8), msccl_struct.h:24 (MSCCL_CHUNKSTEPS NCCL_STEPS/2) and
    # msccl_setup.cc:47 (chunkSteps 1 for LL/LL128);
    # parser.cc:613-620 (a chain of nop dependencies must end at a step with its own dependency)
    loading=(
        "Copy the file into the algorithm directory: $MSCCL_ALGO_DIR, else msccl-algorithms/ next to "
        "libnccl.so, else ../share/nccl/msccl-algorithms, else /usr/share/nccl/msccl-algorithms "
        "(src/misc/msccl/msccl_lifecycle.cc:79-151). Every file there is parsed at communicator init; a file "
        "that fails to parse fails the init.",
        "MSCCL is on by default (NCCL_MSCCL_ENABLE=1, msccl_lifecycle.cc:27). Only one rank per process is "
        "supported (msccl_lifecycle.cc:61-75).",
        "Files are tried in sorted path order; the first that matches is used "
        "(msccl_lifecycle.cc:153-163, 330-345).",
    ),
)
