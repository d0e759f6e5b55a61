"""The MSCCL compiler's IR: an instruction table, one row per instruction of every gpu, as numpy columns
(paper section 7; msccl-tools' instruction DAG, flattened), built by pass 1 (services.compiler.msccl.messages)
and rewritten by passes 2-5 (threadblocks, fusion, order, dependencies; services.compiler.msccl.program runs
them) into an `MscclProgram`, which services.compiler.text.msccl prints.

Columns of the table (`InstructionTable.COLUMNS`; a dict column name -> array, one entry per row):

    gpu     the rank that runs the instruction
    kind    the instruction, a code of `TYPE_NAME`: S send, R receive, RRC receive-reduce-copy, CPY local copy,
            RE local reduce, and the fused RCS / RRCS / RRS (pass 3)
    t       the schedule's comm step the instruction belongs to (1..steps; 0 for an allgather's own shard
            copied into the output first, steps + 1 for results copied home at the end)
    phase   its phase within the comm step: PH_LOCAL (gathers into scratch, copies), PH_SEND, PH_RECV,
            PH_SCATTER (staged receives scattered home); a thread block runs the phases in this order
    sub     the contribution rank within the phase: the rank of the link a reduction arrives on among the
            receiver's links in that step (a unit's contributions are added in this order)
    tie     the order within (t, phase, sub): a send's message id; pass 4 sets a receive's to the rank of
            its message's send, so every connection receives in the order it sent
    speer   the peer a send goes to (-1: not a send)
    rpeer   the peer a receive comes from (-1: not a receive)
    chan    the channel (lane x instances x channels + instance x channels + the shard's channel class)
    sbuf    source buffer (services.compiler.lowering.layout: IBUF input, OBUF output, SBUF scratch; NONE)
    soff    source offset, in chunks, within sbuf (-1: none)
    dbuf    destination buffer (a reduction's accumulator for RRC; NONE for a send)
    doff    destination offset, in chunks, within dbuf (-1: none)
    cnt     chunks the instruction moves, contiguous in both buffers (at most the runtime's max count - 1)
    msg     the message id a send and its receive share (-1: a local instruction)
    fwd_msg (added by pass 3) the message a fused instruction forwards (-1: none)

A row's reads and writes by kind: READS_SRC, READS_DST, WRITES_DST; SENDS and RECEIVES say which kinds talk
to a peer (the fused kinds do both).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..lowering.layout import IBUF, NONE, OBUF, SBUF

__all__ = ["BUF_NAME", "S", "R", "RRC", "CPY", "RE", "RCS", "RRCS", "RRS", "TYPE_NAME", "READS_SRC", "WRITES_DST",
           "READS_DST", "SENDS", "RECEIVES", "PH_LOCAL", "PH_SEND", "PH_RECV", "PH_SCATTER", "XmlStep",
           "MscclOptions", "MscclProgram", "InstructionTable"]

BUF_NAME = {IBUF: "i", OBUF: "o", SBUF: "s", NONE: "i"}
S, R, RRC, CPY, RE, RCS, RRCS, RRS = range(8)
TYPE_NAME = ("s", "r", "rrc", "cpy", "re", "rcs", "rrcs", "rrs")
READS_SRC = np.array([1, 0, 1, 1, 1, 0, 1, 1], dtype=bool)
WRITES_DST = np.array([0, 1, 1, 1, 1, 1, 1, 0], dtype=bool)
READS_DST = np.array([0, 0, 0, 0, 1, 0, 0, 0], dtype=bool)
SENDS = np.array([1, 0, 0, 0, 0, 1, 1, 1], dtype=bool)
RECEIVES = np.array([0, 1, 1, 0, 0, 1, 1, 1], dtype=bool)
PH_LOCAL, PH_SEND, PH_RECV, PH_SCATTER = 0, 1, 2, 3


@dataclass
class XmlStep:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int


@dataclass(frozen=True)
class MscclOptions:
    """instances: every transfer split in that many parts, each on its own channels (P x instances);
    channels: channels a link's messages are spread over (by shard; by message when by_message); mode: "out",
    "in" or "both" (one program that runs in and out of place); consolidate: gather/scatter through scratch;
    combined: one tb per (receive peer, send peer, channel) instead of one per direction; fuse: rcs/rrcs/rrs;
    by_message: the messages formed on one channel are dealt over the channels (Messages.by_message) instead
    of every shard keeping its class's channel."""

    instances: int = 1
    channels: int = 1
    mode: str = "out"
    consolidate: bool = False
    combined: bool = True
    fuse: bool = True
    by_message: bool = False

    def label(self) -> str:
        parts = [f"instances={self.instances}", f"channels={self.channels}", f"mode={self.mode}"]
        if self.by_message and self.channels > 1:
            parts.append("channel per message")
        parts.append("combined tbs" if self.combined else "separate send/receive tbs")
        if self.fuse:
            parts.append("fused")
        if self.consolidate:
            parts.append("consolidated")
        return ", ".join(parts)


@dataclass
class MscclProgram:
    """The instruction table of every gpu, ordered, with tbs and dependencies (ready to print)."""

    nodes: int
    units_per_shard: int
    nchannels: int
    ops: dict                      # column -> array, sorted by (gpu, tb, position)
    tb_gpu: np.ndarray             # per global tb: gpu, send, recv, chan, id (XML id within its gpu)
    tb_send: np.ndarray
    tb_recv: np.ndarray
    tb_chan: np.ndarray
    tb_id: np.ndarray
    xml_pos: np.ndarray            # per op: its XML step index within its tb
    dep_first: np.ndarray          # per op: (depid, deps) of its own dependency (-1, -1)
    nop_deps: tuple                # (ptr per op, depid, deps): op r's nops wait on [ptr[r], ptr[r + 1])
    hasdep: np.ndarray
    i_chunks: int
    o_chunks: int
    s_chunks: np.ndarray           # per gpu
    messages: int
    dropped_units: int
    fused: int
    consolidated: int
    stats: dict = field(default_factory=dict)
    tb_of_op: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per op: its global tb
    max_dep_tb: int = 0            # the most dependencies one tb's op waits on (the dependency pass's)


class InstructionTable:
    """Instruction rows appended in batches (columns as numpy arrays). A batch keeps the arrays it is given
    (pass arrays nothing writes later) and its constant columns as scalars; `concat` writes each column once."""

    COLS = ("gpu", "kind", "t", "phase", "sub", "tie", "speer", "rpeer", "chan", "sbuf", "soff", "dbuf", "doff",
            "cnt", "msg")
    DT = {"kind": np.int8, "phase": np.int8, "sbuf": np.int8, "dbuf": np.int8, "tie": np.int64, "msg": np.int64}

    def __init__(self):
        self.parts: list[tuple[int, dict]] = []

    def add(self, n: int, **cols) -> None:
        if n == 0:
            return
        self.parts.append((n, {c: np.broadcast_to(np.asarray(cols.get(c, -1), dtype=self.DT.get(c, np.int32)), (n,))
                               for c in self.COLS}))

    def concat(self) -> dict:
        total = sum(n for n, _ in self.parts)
        out = {}
        for c in self.COLS:
            col = np.empty(total, dtype=self.DT.get(c, np.int32))
            at = 0
            for n, row in self.parts:
                col[at:at + n] = row[c]
                at += n
            out[c] = col
        return out
