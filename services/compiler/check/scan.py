"""MSCCL XML read into integer columns by a compiled byte scanner (numba), for checking files of millions of steps
(services.compiler.check.msccl).

The scanner reads the file as the runtimes' tokenizer does (services.compiler.check.tokenizer states its rules), but
only in the canonical form our compiler writes (the usual MSCCL attribute order), in which that tokenizer,
ElementTree and this reading agree on every value:

    [spaces and comments] <algo k="v" ...> {<gpu id="I" i_chunks="I" o_chunks="I" s_chunks="I">
      {<tb id="I" send="I" recv="I" chan="I"> {<step s="I" type="T" srcbuf="B" srcoff="I" dstbuf="B" dstoff="I"
      cnt="I" depid="I" deps="I" hasdep="I"/>} </tb>} </gpu>} </algo> [spaces and comments]

(a step may also end in '" />', as ElementTree writes it: the tokenizer reads the space as an eleventh,
nameless attribute, which nothing looks up)
with spaces, newlines and carriage returns between elements, comments `<!-- ... -->` anywhere between elements,
integers I = -?[0-9]{1,18}, step types T among the runtimes' (msccl.TYPE_NAME and nop), buffers B among i, o, s,
and <algo> values of printable ASCII without '"', '<' or '&' (at most 16 attributes, distinct names, values of at
most 255 characters). Anything else (another element, another attribute order, a value that is not such a
number, non-ASCII text outside comments, a truncated file) stops the scanner: `scan_columns` returns None and
the caller reads the file element by element, which finds and words every problem. No Python object is made
per element: one pass over the bytes fills preallocated arrays, sized by counting the element openings first.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..msccl.ir import TYPE_NAME
from ..text.xmltext import Fragments
from .tokenizer import MAX_ATTRS, MAX_VALUE, Node, opening_tag

__all__ = ["Columns", "scan_columns", "KIND_NAMES", "BUF_NAMES"]

# kind codes of the step column, as services.compiler.check.deadlock numbers them
KIND_NAMES = TYPE_NAME + ("nop",)
BUF_NAMES = ("i", "o", "s")
_LIT = Fragments('<gpu id="', '" i_chunks="', '" o_chunks="', '" s_chunks="', '">', '<tb id="', '" send="',
                 '" recv="', '" chan="', '</tb>', '</gpu>', '<step s="', '" type="', '" srcbuf="', '" srcoff="',
                 '" dstbuf="', '" dstoff="', '" cnt="', '" depid="', '" deps="', '" hasdep="', '"/>', '</algo>',
                 '<!--', '-->', '<algo', *KIND_NAMES, '" />')
_KIND0 = 26                              # fragment of KIND_NAMES[0]
_SPACED = _KIND0 + len(KIND_NAMES)       # '" />', the end of a step as ElementTree writes it


@njit(cache=True, nogil=True, inline="always")
def _lit(b, p, frag, off, k):
    """p after fragment k if the bytes at p spell it, else -1."""
    a, e = off[k], off[k + 1]
    if p + (e - a) > b.size:
        return -1
    for i in range(e - a):
        if b[p + i] != frag[a + i]:
            return -1
    return p + (e - a)


@njit(cache=True, nogil=True, inline="always")
def _num(b, p, out, i, j):
    """Read -?[0-9]{1,18} at p into out[i, j]; p after it (at the closing quote), or -1."""
    n = b.size
    neg = False
    if p < n and b[p] == 45:
        neg = True
        p += 1
    v = np.int64(0)
    d = 0
    while p < n and 48 <= b[p] <= 57:
        if d == 18:
            return -1
        v = v * 10 + (b[p] - 48)
        d += 1
        p += 1
    if d == 0 or p >= n or b[p] != 34:
        return -1
    out[i, j] = -v if neg else v
    return p


@njit(cache=True, nogil=True, inline="always")
def _element4(b, q, frag, off, out, i, k1, k2, k3):
    """Read the four integers of a <gpu> or <tb> opening tag from just after its first `="`, the three
    attribute texts between them fragments k1, k2, k3, the end '">' (fragment 4), into out[i]; q after the tag,
    or -1."""
    for k, col in ((k1, 0), (k2, 1), (k3, 2), (4, 3)):
        if q >= 0:
            q = _num(b, q, out, i, col)
        if q >= 0:
            q = _lit(b, q, frag, off, k)
    return q


@njit(cache=True, nogil=True, inline="always")
def _child_or_close(b, p, frag, off, open_k, close_k, out, i, k1, k2, k3):
    """At p inside a <algo> or <gpu>: the opening tag of a child (fragment open_k, then `_element4` into out[i],
    which must have room) or the parent's closing tag (fragment close_k). (q after it or -1, opened)."""
    q = _lit(b, p, frag, off, open_k)
    if q >= 0:
        return (_element4(b, q, frag, off, out, i, k1, k2, k3) if i < out.shape[0] else -1), True
    return _lit(b, p, frag, off, close_k), False


@njit(cache=True, nogil=True, inline="always")
def _buf(b, p):
    """Code of a one-letter buffer value at p (i, o, s) followed by a quote, or -1."""
    if p + 1 >= b.size or b[p + 1] != 34:
        return -1
    c = b[p]
    return 0 if c == 105 else 1 if c == 111 else 2 if c == 115 else -1


@njit(cache=True, nogil=True)
def _skip(b, p, frag, off):
    """p after the spaces, newlines, carriage returns and comments at p (-1: a malformed comment)."""
    n = b.size
    while p < n:
        c = b[p]
        if c == 32 or c == 10 or c == 13:
            p += 1
            continue
        q = _lit(b, p, frag, off, 23)
        if q < 0:
            return p
        if _lit(b, q, frag, off, 24) >= 0:          # <!---->
            p = q + 3
            continue
        if q >= n or b[q] != 32:
            return -1
        k = q + 1
        while k + 2 < n and not (b[k] == 45 and b[k + 1] == 45 and b[k + 2] == 62):
            k += 1
        if k + 2 >= n:
            return -1
        p = k + 3
    return p


@njit(cache=True, nogil=True)
def _openings(b):
    """How many '<g', '<t' and '<s' the text holds: bounds on its gpus, thread blocks and steps."""
    g = t = s = 0
    for i in range(b.size - 1):
        if b[i] == 60:
            c = b[i + 1]
            g += c == 103
            t += c == 116
            s += c == 115
    return g, t, s


@njit(cache=True, nogil=True)
def _scan(b, frag, off, gpus, tbs, steps, gpu_tb, tb_step):
    """Fill the columns; returns (stop, algo_start, algo_end, gpus, tbs, steps): stop -1 when the whole text is
    the canonical form, else the byte where it is not (see the module docstring)."""
    n = b.size
    ng = nt = ns = 0
    a0 = a1 = -1
    state = 0                     # 0 before <algo>, 1 in algo, 2 in gpu, 3 in tb, 4 after </algo>
    p = 0
    while True:
        p = _skip(b, p, frag, off)
        if p < 0:
            return n, a0, a1, ng, nt, ns
        if p >= n:
            break
        at = p
        if state == 3:
            q = _lit(b, p, frag, off, 11)
            if q >= 0:
                if ns >= steps.shape[1]:
                    return at, a0, a1, ng, nt, ns
                q = _num(b, q, steps, 0, ns)
                if q >= 0:
                    q = _lit(b, q, frag, off, 12)
                if q < 0:
                    return at, a0, a1, ng, nt, ns
                kind = -1
                for k in range(9):
                    e = _lit(b, q, frag, off, _KIND0 + k)
                    if e >= 0 and e < n and b[e] == 34:
                        kind = k
                        q = e
                        break
                if kind < 0:
                    return at, a0, a1, ng, nt, ns
                steps[1, ns] = kind
                q = _lit(b, q, frag, off, 13)
                if q < 0:
                    return at, a0, a1, ng, nt, ns
                c = _buf(b, q)
                if c < 0:
                    return at, a0, a1, ng, nt, ns
                steps[2, ns] = c
                q = _lit(b, q + 1, frag, off, 14)
                if q >= 0:
                    q = _num(b, q, steps, 3, ns)
                if q >= 0:
                    q = _lit(b, q, frag, off, 15)
                if q < 0:
                    return at, a0, a1, ng, nt, ns
                c = _buf(b, q)
                if c < 0:
                    return at, a0, a1, ng, nt, ns
                steps[4, ns] = c
                q = _lit(b, q + 1, frag, off, 16)
                for k, col in ((17, 5), (18, 6), (19, 7), (20, 8)):
                    if q >= 0:
                        q = _num(b, q, steps, col, ns)
                    if q >= 0:
                        q = _lit(b, q, frag, off, k)
                if q >= 0:
                    q = _num(b, q, steps, 9, ns)
                if q >= 0:
                    e = _lit(b, q, frag, off, 21)
                    q = e if e >= 0 else _lit(b, q, frag, off, _SPACED)
                if q < 0:
                    return at, a0, a1, ng, nt, ns
                ns += 1
                p = q
                continue
            q = _lit(b, p, frag, off, 9)
            if q < 0:
                return at, a0, a1, ng, nt, ns
            nt += 1
            tb_step[nt] = ns
            state = 2
            p = q
        elif state == 2:              # a <tb> of the gpu, or its </gpu>
            q, opened = _child_or_close(b, p, frag, off, 5, 10, tbs, nt, 6, 7, 8)
            if q < 0:
                return at, a0, a1, ng, nt, ns
            if opened:
                tb_step[nt] = ns
                state = 3
            else:
                ng += 1
                gpu_tb[ng] = nt
                state = 1
            p = q
        elif state == 1:              # a <gpu> of the algo, or </algo>
            q, opened = _child_or_close(b, p, frag, off, 0, 22, gpus, ng, 1, 2, 3)
            if q < 0:
                return at, a0, a1, ng, nt, ns
            if opened:
                gpu_tb[ng] = nt
                state = 2
            else:
                state = 4
            p = q
        elif state == 0:
            q = _lit(b, p, frag, off, 25)
            if q < 0:
                return at, a0, a1, ng, nt, ns
            attrs = 0
            while q < n and b[q] == 32:             # key="value" with a plain name and a plain value
                q += 1
                k = q
                while q < n and (48 <= b[q] <= 57 or 65 <= b[q] <= 90 or 97 <= b[q] <= 122 or b[q] == 95):
                    q += 1
                if q == k or q + 1 >= n or b[q] != 61 or b[q + 1] != 34:
                    return at, a0, a1, ng, nt, ns
                q += 2
                k = q
                while q < n and 32 <= b[q] <= 126 and b[q] != 34 and b[q] != 60 and b[q] != 38:
                    q += 1
                if q >= n or b[q] != 34 or q - k > 255:
                    return at, a0, a1, ng, nt, ns
                q += 1
                attrs += 1
            if q >= n or b[q] != 62 or attrs > 16:
                return at, a0, a1, ng, nt, ns
            a0, a1 = at, q + 1
            state = 1
            p = q + 1
        else:
            return at, a0, a1, ng, nt, ns
    if state != 4:
        return n, a0, a1, ng, nt, ns
    return -1, a0, a1, ng, nt, ns


@dataclass
class Columns:
    """One MSCCL file as columns, in file order: gpus (id, i_chunks, o_chunks, s_chunks), their thread blocks
    gpu_tb[g]:gpu_tb[g + 1] (id, send, recv, chan), and the steps of thread block t tb_step[t]:tb_step[t + 1]
    (s, kind as KIND_NAMES numbers it, srcbuf and dstbuf as BUF_NAMES numbers them, srcoff, dstoff, cnt, depid,
    deps, hasdep); `algo` is the <algo> element as the tokenizer reads it."""

    algo: Node
    gpus: np.ndarray            # (G, 4) int64
    tbs: np.ndarray             # (T, 4) int64
    steps: np.ndarray           # (10, S) int64: one row per column
    gpu_tb: np.ndarray          # (G + 1,) int64
    tb_step: np.ndarray         # (T + 1,) int64

    @property
    def tb_gpu(self) -> np.ndarray:
        """The gpu (file position) of every thread block."""
        return np.repeat(np.arange(self.gpus.shape[0]), np.diff(self.gpu_tb))

    @property
    def step_tb(self) -> np.ndarray:
        """The thread block (file position) of every step."""
        return np.repeat(np.arange(self.tbs.shape[0]), np.diff(self.tb_step))


def scan_columns(data: bytes) -> Columns | None:
    """The columns of an MSCCL file in the canonical form (module docstring), or None when it is not in it.
    Linear in the file's bytes; memory: 80 bytes per step on top of the file."""
    b = np.frombuffer(data, np.uint8)
    caps = [c + 1 for c in _openings(b)]
    gpus, tbs = (np.empty((c, 4), np.int64) for c in caps[:2])
    steps = np.empty((10, caps[2]), np.int64)
    gpu_tb = np.zeros(caps[0] + 1, np.int64)
    tb_step = np.zeros(caps[1] + 1, np.int64)
    stop, a0, a1, ng, nt, ns = _scan(b, _LIT.data, _LIT.off, gpus, tbs, steps, gpu_tb, tb_step)
    if stop >= 0:
        return None
    read = opening_tag(data[a0:a1].decode("ascii"))
    if read is None or read[0] != "algo":
        return None
    attrs = read[1]
    names = [k for k, _ in attrs]
    if len(set(names)) != len(names) or len(names) > MAX_ATTRS or any(len(v) > MAX_VALUE for _, v in attrs):
        return None
    algo = Node("algo", dict(attrs), data.count(b"\n", 0, a0) + 1)
    return Columns(algo, gpus[:ng], tbs[:nt], steps[:, :ns], gpu_tb[:ng + 1], tb_step[:nt + 1])
