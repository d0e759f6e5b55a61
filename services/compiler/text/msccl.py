"""MSCCL XML text of a compiled program (services.compiler.msccl.ir.MscclProgram), in the form the runtimes'
tokenizer accepts (services.compiler.check.tokenizer states it), written in blocks of whole gpus by the kernels
of services.compiler.text.xmltext."""
from __future__ import annotations

import numpy as np

from ..msccl.ir import READS_DST, READS_SRC, WRITES_DST, MscclProgram
from ..runtimes import RuntimeProfile
from .xmltext import MSCCL as MSCCL_TEXT
from .xmltext import block_bounds, fill_blocks, line_bound, msccl_gpus

__all__ = ["XML_BLOCK_OPS", "to_xml", "xml_chunks"]


def _attr_text(x: str) -> str:
    return "".join(ch if ch.isalnum() or ch in " ,()_.+:/" else "_" for ch in x)[:200]


def to_xml(prog: MscclProgram, *, name: str, coll: str, proto: str, profile: RuntimeProfile, inplace: bool,
           outofplace: bool, min_bytes: int, max_bytes: int, header: str = "") -> bytes:
    """XML file (ASCII bytes) in the form the runtimes' tokenizer accepts: no declaration, one element per line,
    attributes on one line separated by single spaces, double quotes, space indentation. The pieces of
    `xml_chunks` joined: memory is the file's size plus one block's text."""
    return b"".join(xml_chunks(prog, name=name, coll=coll, proto=proto, profile=profile, inplace=inplace,
                               outofplace=outofplace, min_bytes=min_bytes, max_bytes=max_bytes, header=header))


XML_BLOCK_OPS = 1 << 18               # instructions whose text one block holds (whole gpus, at least one)


def xml_chunks(prog: MscclProgram, *, name: str, coll: str, proto: str, profile: RuntimeProfile, inplace: bool,
               outofplace: bool, min_bytes: int, max_bytes: int, header: str = ""):
    """The file of `to_xml` as consecutive bytes-like pieces (write each to a file or store as it comes): the
    header and <algo> line, then the text of blocks of whole gpus, each written by a compiled kernel into a
    buffer of its exact size (services.compiler.text.xmltext.msccl_gpus), then </algo>."""
    values = {"name": _attr_text(name), "proto": proto, "nchannels": prog.nchannels,
              "nchunksperloop": prog.nodes * prog.units_per_shard, "ngpus": prog.nodes, "coll": coll,
              "inplace": int(inplace), "outofplace": int(outofplace), "minBytes": min_bytes, "maxBytes": max_bytes}
    attrs = " ".join(f'{a}="{values[a]}"' for a in profile.algo_written)
    if header:
        yield f"<!-- fabricplan {header.replace('--', '- -')} -->\n".encode()
    yield f"<algo {attrs}>\n".encode()
    ops = prog.ops
    i64 = np.int64
    op_start = np.searchsorted(prog.tb_of_op, np.arange(prog.tb_gpu.size + 1)).astype(i64)
    gpu_tb = np.searchsorted(prog.tb_gpu, np.arange(prog.nodes + 1)).astype(i64)
    gpu_op = op_start[gpu_tb]
    tb_cols = [np.ascontiguousarray(a, i64) for a in (prog.tb_id, prog.tb_send, prog.tb_recv, prog.tb_chan)]
    s_chunks = np.ascontiguousarray(prog.s_chunks, i64)
    nop_ptr, nop_tb, nop_pos = (np.ascontiguousarray(a, i64) for a in prog.nop_deps)

    gpu_line, tb_line = line_bound(MSCCL_TEXT, (0, 1, 2, 3, 4, 10), 4), line_bound(MSCCL_TEXT, (5, 6, 7, 8, 4, 9), 4)
    step_line = line_bound(MSCCL_TEXT, (11, 15, 16, 17, 18, 19, 20, 21, 13, 22, 23), 10)
    nop_line = line_bound(MSCCL_TEXT, (11, 12, 13, 14), 3)

    def args(a: int, b: int):
        r0, r1 = int(gpu_op[a]), int(gpu_op[b])
        bound = ((b - a) * gpu_line + int(gpu_tb[b] - gpu_tb[a]) * tb_line + (r1 - r0) * step_line
                 + int(nop_ptr[r1] - nop_ptr[r0]) * nop_line)
        kind, sbuf, soff, dbuf, doff, cnt = (np.ascontiguousarray(ops[c][r0:r1]) for c in (
            "kind", "sbuf", "soff", "dbuf", "doff", "cnt"))
        return bound, (MSCCL_TEXT.data, MSCCL_TEXT.off, a, b, gpu_tb, int(prog.i_chunks), int(prog.o_chunks),
                       s_chunks, *tb_cols, op_start, r0, np.ascontiguousarray(prog.xml_pos[r0:r1], i64), kind, sbuf,
                       soff, dbuf, doff, cnt, np.ascontiguousarray(prog.dep_first[r0:r1], i64),
                       np.ascontiguousarray(prog.hasdep[r0:r1]), nop_ptr, nop_tb, nop_pos, READS_SRC,
                       WRITES_DST | READS_DST)

    yield from fill_blocks(msccl_gpus, block_bounds(gpu_op, XML_BLOCK_OPS), args)
    yield b"</algo>\n"
