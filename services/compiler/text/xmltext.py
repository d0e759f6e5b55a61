"""XML text as array work: compiled kernels (numba) that write the element lines of a compiled program straight
into byte buffers, from the integer columns of its instruction table.

A file is written in blocks of whole gpus (ranks): a kernel fills a preallocated uint8 buffer, as large as the
block's lines can be (every line's fixed text plus 20 characters per integer), with the fixed text of every
line and its decimal integers, and the block is the part it filled. No Python object is made per element;
the text is the same, byte for byte, as formatting every line with f-strings would give (`str(int)`: a minus
sign for negatives, no leading zeros).

Fixed text lives in one uint8 array of fragments (`Fragments`); a kernel copies fragment k with
`_put(buf, pos, frag, off, k)`.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..common.pool import ordered_map

__all__ = ["Fragments", "block_bounds", "fill_blocks"]


class Fragments:
    """Fixed ASCII strings as one uint8 array and their offsets (fragment k = data[off[k]:off[k + 1]])."""

    def __init__(self, *texts: str):
        raw = [t.encode("ascii") for t in texts]
        self.data = np.frombuffer(b"".join(raw), np.uint8).copy()
        self.off = np.zeros(len(raw) + 1, np.int64)
        self.off[1:] = np.cumsum([len(r) for r in raw])


@njit(cache=True, nogil=True, inline="always")
def _put(buf, pos, frag, off, k):
    a, b = off[k], off[k + 1]
    buf[pos:pos + (b - a)] = frag[a:b]
    return pos + (b - a)


_DIGIT_PAIRS = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode("ascii"), np.uint8).copy()


@njit(cache=True, nogil=True, inline="always")
def _int(buf, pos, x):
    """Write the decimal text of integer x at pos; returns the position after it (two digits per division)."""
    x = np.int64(x)
    if 0 <= x < 10:                       # most fields (hasdep, cnt, small ids) take one digit
        buf[pos] = 48 + x
        return pos + 1
    if x == -1:                           # depid / deps / unused offsets
        buf[pos] = 45
        buf[pos + 1] = 49
        return pos + 2
    neg = x < 0
    v = -x if neg else x
    n = 1
    t = v
    while t >= 100:
        t //= 100
        n += 2
    if t >= 10:
        n += 1
    if neg:
        buf[pos] = 45                     # "-"
        n += 1
    i = pos + n
    while v >= 100:
        q = v // 100
        r = 2 * (v - 100 * q)
        buf[i - 2] = _DIGIT_PAIRS[r]
        buf[i - 1] = _DIGIT_PAIRS[r + 1]
        i -= 2
        v = q
    if v >= 10:
        buf[i - 2] = _DIGIT_PAIRS[2 * v]
        buf[i - 1] = _DIGIT_PAIRS[2 * v + 1]
    else:
        buf[i - 1] = 48 + v
    return pos + n


def block_bounds(row_start: np.ndarray, rows_per_block: int) -> list[tuple[int, int]]:
    """Blocks [a, b) of whole groups (gpus or ranks) holding about rows_per_block rows each, at least one group;
    row_start[g] is group g's first row (len = groups + 1)."""
    groups = row_start.size - 1
    out, a = [], 0
    while a < groups:
        b = int(np.searchsorted(row_start, row_start[a] + rows_per_block, "right")) - 1
        b = min(max(b, a + 1), groups)
        out.append((a, b))
        a = b
    return out


INT_CHARS = 20                        # the most characters of an int64's decimal text ("-9223372036854775808")


def line_bound(frag: Fragments, fixed: tuple[int, ...], ints: int) -> int:
    """The most characters a line of fragments `fixed` and `ints` integers (or single letters) can take."""
    return int(sum(frag.off[k + 1] - frag.off[k] for k in fixed)) + INT_CHARS * ints


def fill_blocks(kernel, blocks, args_of):
    """Yield the text of every block as a uint8 array: args_of(a, b) -> (bound, args); kernel(buf, *args) fills
    a buffer of `bound` bytes and returns where it stopped. Blocks are filled on up to COMPILE_THREADS threads
    (services.compiler.common.pool; the kernels release the GIL) and yielded in order."""
    def fill(block):
        bound, args = args_of(*block)
        buf = np.empty(bound, np.uint8)
        end = kernel(buf, *args)
        return buf[:end]
    return ordered_map(fill, blocks)


# ---------------------------------------------------------------------------------------------------------
# MSCCL: <gpu>, <tb> and <step> lines (services.compiler.text.msccl.to_xml writes the <algo> element around them)
# ---------------------------------------------------------------------------------------------------------
MSCCL_TYPES = ("s", "r", "rrc", "cpy", "re", "rcs", "rrcs", "rrs")       # msccl.TYPE_NAME, by kind
MSCCL_BUFFERS = "ios"                 # layout.IBUF, OBUF, SBUF
MSCCL = Fragments('  <gpu id="', '" i_chunks="', '" o_chunks="', '" s_chunks="', '">\n',
                  '    <tb id="', '" send="', '" recv="', '" chan="', '    </tb>\n', '  </gpu>\n',
                  '      <step s="',
                  '" type="nop" srcbuf="i" srcoff="-1" dstbuf="o" dstoff="-1" cnt="0" depid="', '" deps="',
                  '" hasdep="0"/>\n', '" type="', '" srcbuf="', '" srcoff="', '" dstbuf="', '" dstoff="', '" cnt="',
                  '" depid="', '" hasdep="', '"/>\n',
                  # the text between a step's s and srcoff values, by (kind, source buffer), and between its
                  # srcoff and dstoff values, by destination buffer: one copy each instead of five
                  *(f'" type="{t}" srcbuf="{b}" srcoff="' for t in MSCCL_TYPES for b in MSCCL_BUFFERS),
                  *(f'" dstbuf="{b}" dstoff="' for b in MSCCL_BUFFERS))
_M_SRC0 = 24
_M_DST0 = _M_SRC0 + len(MSCCL_TYPES) * len(MSCCL_BUFFERS)


@njit(cache=True, nogil=True)
def msccl_gpus(buf, frag, off, g0, g1, gpu_tb, i_chunks, o_chunks, s_chunks, tb_id, tb_send, tb_recv,
               tb_chan, op_start, r0, xml_pos, kind, sbuf, soff, dbuf, doff, cnt, dep, hasdep, nop_ptr, nop_tb,
               nop_pos, src_used, dst_used):
    """The lines of gpus [g0, g1). Per-op columns start at op r0 (op_start and nop_ptr hold global indices);
    sbuf/dbuf are buffer ids (0, 1, 2: i, o, s, MSCCL_BUFFERS; -1, none, is written i); an instruction whose
    kind does not use its source (src_used[kind]) or destination (dst_used[kind]) writes it as i -1 / o -1;
    dep[r] = (depid, deps); op r's nops wait on (nop_tb, nop_pos)[nop_ptr[r]:nop_ptr[r + 1]] and are numbered
    just below its own step."""
    p = 0
    for g in range(g0, g1):
        p = _put(buf, p, frag, off, 0)
        p = _int(buf, p, g)
        p = _put(buf, p, frag, off, 1)
        p = _int(buf, p, i_chunks)
        p = _put(buf, p, frag, off, 2)
        p = _int(buf, p, o_chunks)
        p = _put(buf, p, frag, off, 3)
        p = _int(buf, p, s_chunks[g])
        p = _put(buf, p, frag, off, 4)
        for t in range(gpu_tb[g], gpu_tb[g + 1]):
            p = _put(buf, p, frag, off, 5)
            p = _int(buf, p, tb_id[t])
            p = _put(buf, p, frag, off, 6)
            p = _int(buf, p, tb_send[t])
            p = _put(buf, p, frag, off, 7)
            p = _int(buf, p, tb_recv[t])
            p = _put(buf, p, frag, off, 8)
            p = _int(buf, p, tb_chan[t])
            p = _put(buf, p, frag, off, 4)
            for r in range(op_start[t], op_start[t + 1]):
                lo, hi = nop_ptr[r], nop_ptr[r + 1]
                i = r - r0
                first = xml_pos[i] - (hi - lo)
                for k in range(lo, hi):
                    p = _put(buf, p, frag, off, 11)
                    p = _int(buf, p, first + k - lo)
                    p = _put(buf, p, frag, off, 12)
                    p = _int(buf, p, nop_tb[k])
                    p = _put(buf, p, frag, off, 13)
                    p = _int(buf, p, nop_pos[k])
                    p = _put(buf, p, frag, off, 14)
                p = _put(buf, p, frag, off, 11)
                p = _int(buf, p, xml_pos[i])
                k = np.int64(kind[i])
                sb, so, db, do = 0, -1, 1, -1
                if src_used[k]:
                    sb, so = max(np.int64(sbuf[i]), 0), np.int64(soff[i])
                if dst_used[k]:
                    db, do = max(np.int64(dbuf[i]), 0), np.int64(doff[i])
                p = _put(buf, p, frag, off, _M_SRC0 + 3 * k + sb)
                p = _int(buf, p, so)
                p = _put(buf, p, frag, off, _M_DST0 + db)
                p = _int(buf, p, do)
                p = _put(buf, p, frag, off, 20)
                p = _int(buf, p, cnt[i])
                p = _put(buf, p, frag, off, 21)
                p = _int(buf, p, dep[i, 0])
                p = _put(buf, p, frag, off, 13)
                p = _int(buf, p, dep[i, 1])
                p = _put(buf, p, frag, off, 22)
                p = _int(buf, p, hasdep[i])
                p = _put(buf, p, frag, off, 23)
            p = _put(buf, p, frag, off, 9)
        p = _put(buf, p, frag, off, 10)
    return p


# ---------------------------------------------------------------------------------------------------------
# oneCCL: <rank> elements and their instruction lines (services.compiler.text.oneccl writes the root element)
# ---------------------------------------------------------------------------------------------------------
ONECCL_TEMPLATES = (                  # by kind; buffer fields (named, not numbered) listed after the template
    ('<recv peer="{}" buf="{}" off="{}" cnt="{}" tag="{}"/>', (1,)),
    ('<send peer="{}" buf="{}" off="{}" cnt="{}" tag="{}"/>', (1,)),
    ('<sync step="{}"/>', ()),
    ('<reduce srcbuf="tmp" srcoff="{}" accbuf="{}" accoff="{}" dstbuf="{}" dstoff="{}" cnt="{}"/>', (1, 3)),
    ('<copy srcbuf="{}" srcoff="{}" dstbuf="{}" dstoff="{}" cnt="{}"/>', (0, 2)),
)
ONECCL_BUFFERS = ("in", "out", "tmp")


def _oneccl_tables():
    texts = ['  <rank id="', '" in_chunks="', '" out_chunks="', '" tmp_chunks="', '">\n', '  </rank>\n',
             *ONECCL_BUFFERS]
    first = np.zeros(len(ONECCL_TEMPLATES), np.int64)
    width = np.zeros(len(ONECCL_TEMPLATES), np.int64)
    named = np.zeros((len(ONECCL_TEMPLATES), 6), np.bool_)
    for k, (tmpl, bufs) in enumerate(ONECCL_TEMPLATES):
        pieces = tmpl.split("{}")
        pieces[0], pieces[-1] = "    " + pieces[0], pieces[-1] + "\n"
        first[k], width[k] = len(texts), len(pieces) - 1
        named[k, list(bufs)] = True
        texts.extend(pieces)
    return Fragments(*texts), first, width, named


ONECCL, ONECCL_FIRST, ONECCL_WIDTH, ONECCL_NAMED = _oneccl_tables()
_O_BUF0 = 6


@njit(cache=True, nogil=True)
def oneccl_ranks(buf, frag, off, first, width, named, r0, r1, bounds, in_chunks, out_chunks, tmp, kind, vals):
    """The <rank> elements of ranks [r0, r1): rank r's instructions are rows bounds[r - r0]:bounds[r - r0 + 1]
    of kind / vals (vals[i, row]: field i; named fields hold 0/1/2 for in/out/tmp, -1 reading as tmp)."""
    p = 0
    for r in range(r0, r1):
        p = _put(buf, p, frag, off, 0)
        p = _int(buf, p, r)
        p = _put(buf, p, frag, off, 1)
        p = _int(buf, p, in_chunks)
        p = _put(buf, p, frag, off, 2)
        p = _int(buf, p, out_chunks)
        p = _put(buf, p, frag, off, 3)
        p = _int(buf, p, tmp[r])
        p = _put(buf, p, frag, off, 4)
        for row in range(bounds[r - r0], bounds[r - r0 + 1]):
            k = kind[row]
            f = first[k]
            for i in range(width[k]):
                p = _put(buf, p, frag, off, f + i)
                v = vals[i, row]
                if named[k, i]:
                    p = _put(buf, p, frag, off, _O_BUF0 + (v + 3 if v < 0 else v))
                else:
                    p = _int(buf, p, v)
            p = _put(buf, p, frag, off, f + width[k])
        p = _put(buf, p, frag, off, 5)
    return p
