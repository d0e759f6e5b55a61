"""microsoft/msccl, the research prototype (NCCL 2.12 with an MSCCL interpreter; also the base of TACCL-era
runtimes). Same XML tokenizer as NCCL's topology files; a separate, older algorithm parser.

Facts read from microsoft/msccl@b23e9cd5dd63f82ee1c5aae7e0a2042079be903a (2023-09-20); each line below cites
its source.
"""
from __future__ import annotations

from .profile import STEP_TYPES, RuntimeProfile

__all__ = ["LEGACY"]

LEGACY = RuntimeProfile(
    name="legacy",
    title="microsoft/msccl research prototype",
    source="microsoft/msccl@b23e9cd5",
    # src/graph/topo.cc:826-845 (reduce_scatter with an underscore; custom)
    collectives={"allgather": "allgather", "reducescatter": "reduce_scatter", "allreduce": "allreduce",
                 "alltoall": "alltoall", "reduce": "reduce", "broadcast": "broadcast"},
    # src/graph/topo.cc:986-1030; `ra` (residual add, :1021) parses but no interpreter branch executes it
    # (src/collectives/device/msccl_interpreter.h has none), so it is not a usable type
    step_types=STEP_TYPES,
    # src/graph/topo.cc:771 (name), :775 (ngpus), :782-787 (nchunksperloop, nchannels, proto), :823 (coll),
    # :848 (inplace); minBytes/maxBytes optional (:790-806), outofplace never read
    algo_required=("name", "ngpus", "nchunksperloop", "nchannels", "proto", "coll", "inplace"),
    algo_written=("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "minBytes",
                  "maxBytes"),
    # src/graph/tuning.cc:356/368 (inPlace == mscclAlgo->inPlace): a file serves one mode
    reads_outofplace=False,
    # src/include/msccl.h:6 (MSCCL_MAX_NUM_STEPS 256), topo.cc:972
    max_steps=256,
    # src/include/msccl.h:8 (MSCCL_MAX_NUM_THREAD_BLOCKS 108*2), topo.cc:903
    max_tbs=216,
    # src/include/devcomm.h:51 (MAXCHANNELS 32); topo.cc:936 accepts chan == MAXCHANNELS, then :943 indexes
    # past mscclChannels; msccl.h:63 (int8_t channelId)
    max_channels=32,
    # src/graph/tuning.cc:369 (info->nBytes < mscclAlgo->maxBytes): maxBytes=0 is never selected
    max_bytes_zero_unbounded=False,
    max_bytes_inclusive=False,
    # src/graph/topo.cc:805 (absent maxBytes: 1 << 27 = 128 MiB); :807-818 (minBytes > maxBytes, negative fail)
    default_max_bytes=1 << 27,
    # src/include/msccl.h:9 (MSCCL_MAX_NUM_ALGOS 4), topo.cc:1202-1204
    max_algorithms=4,
    # src/graph/topo.cc:886-889 (i_chunks x (nranks for allgather) and o_chunks x (nranks for
    # reduce_scatter) must equal nchunksperloop when > 0)
    io_chunks_checked=True,
    # src/graph/topo.cc:1082/1095 (nchunksForPeer[count-1]: a send or receive of cnt 0 writes before the array)
    comm_count_min=1,
    # src/init.cc:814 (scratch = maxBytes x s_chunks / nchunksperloop, allocated once at init)
    scratch_from_max_bytes=True,
    # src/include/msccl.h:65-66 (int8 dependentBid, int16 dependentStep), :10 (MSCCL_MAX_COUNT 72, topo.cc:1065),
    # :7 (32 tbs per channel, topo.cc:1076/1090), :46-47 (int16 offsets), :11 (MSCCL_MAX_REDUCE_FUSION 16,
    # topo.cc:1125); src/graph/xml.h:16-19 (MAX_STR_LEN 255, MAX_ATTR_COUNT 16, MAX_SUBS 1024, MAX_NODES 4096),
    # xml.cc:171 (MAX_NODES), :197 (subs[nSubs++] unchecked); src/include/devcomm.h:33 (NCCL_STEPS 8),
    # collectives.h:115/117 (CHUNKSTEPS NCCL_STEPS/2); topo.cc:1105 (nop dependency chains)
    loading=(
        "List the files in MSCCL_XML_FILES=/path/a.xml:/path/b.xml (src/init.cc:783-790, topo.cc:1195-1216), "
        "or in an MSCCL_CONFIG file <msccl_algos><load path=... minbytes=... maxbytes=... proto=.../></msccl_algos> "
        "(topo.cc:1219-1284). At most 4 algorithms load (msccl.h:9); a file that fails to parse is skipped "
        "with a warning.",
        "Set NCCL_ALGO=MSCCL,RING,TREE: MSCCL is off by default (src/graph/tuning.cc:186, 217, allreduce).",
        "Sizes: minBytes <= nbytes < maxBytes (tuning.cc:369); the scratch buffer is allocated at init for "
        "maxBytes (init.cc:814).",
    ),
)
