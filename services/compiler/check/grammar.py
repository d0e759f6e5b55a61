"""The runtimes' tokenizer grammar (`tokenizer._DOC`) as a compiled byte automaton: a fast accept for files
of hundreds of MB.

`tokenizer._DOC` is the language of documents the MSCCL runtimes' hand-written parser reads: items
(comments, closing tags, opening tags with their attributes) separated by spaces, newlines and carriage
returns. Every item of it is decided by its own bytes, deterministically: a name is the longest run of
name bytes (a shorter one leaves a name byte where the grammar wants ' ', '/' or '>'), a value runs to the
next double quote, a comment to its first '-->'. So one left-to-right pass with no backtracking decides
each item exactly as the regular expression does; `grammar_scan` returns where the first item the grammar
cannot read starts (or -1) and the longest stretch of whitespace plus item, which the windowed regular
expression (`tokenizer._grammar_stop`, windows of up to `MAX_WINDOW` bytes) needs to fit in a window to
reach the same verdict. tests/compiler/check/test_grammar.py compares the two on random documents.

Measured on the 288 MB file of the 1024-rank allreduce: 0.3 s CPU, where the regular expression takes 2.3 s.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["grammar_scan"]

_MAX_NAME = 253
_MAX_VALUE = 255
_LT, _GT, _SLASH, _BANG, _DASH, _EQ, _QUOTE, _SP, _NL, _CR = 60, 62, 47, 33, 45, 61, 34, 32, 10, 13


@njit(cache=True, nogil=True, inline="always")
def _name_byte(c):
    """[^= >/\\n\\r]"""
    return not (c == _EQ or c == _SP or c == _GT or c == _SLASH or c == _NL or c == _CR)


@njit(cache=True, nogil=True)
def _name_end(b, q, n):
    """The end of the run of name bytes from q."""
    while q < n and _name_byte(b[q]):
        q += 1
    return q


@njit(cache=True, nogil=True)
def _item_end(b, p, n):
    """End (exclusive) of the item starting with '<' at p, or -1 when the grammar cannot read one there."""
    if p + 3 < n and b[p + 1] == _BANG and b[p + 2] == _DASH and b[p + 3] == _DASH:     # <!-- (no opening tag)
        q = p + 4
        if q + 2 < n and b[q] == _DASH and b[q + 1] == _DASH and b[q + 2] == _GT:
            return q + 3
        if q < n and b[q] == _SP:                       # ' ' then the shortest run to '-->'
            r = q + 1
            while r + 2 < n:
                if b[r] == _DASH and b[r + 1] == _DASH and b[r + 2] == _GT:
                    return r + 3
                r += 1
        return -1
    q = _name_end(b, p + 1, n)                          # a closing tag reads as '<' + '' + '/name' + '>' too
    if q - (p + 1) > _MAX_NAME:
        return -1
    while q < n and b[q] == _SP:                        # attributes: ' key="value"'
        r = _name_end(b, q + 1, n)
        k = q + 1
        while k < r and b[k] != _QUOTE:                 # a key holds no double quote
            k += 1
        if k < r or r - (q + 1) < 1 or r - (q + 1) > _MAX_NAME:
            return -1
        if not (r + 1 < n and b[r] == _EQ and b[r + 1] == _QUOTE):
            return -1
        v = r + 2
        while v < n and b[v] != _QUOTE:
            v += 1
        if v >= n or v - (r + 2) > _MAX_VALUE:
            return -1
        q = v + 1
    if q < n and b[q] == _SLASH:
        r = _name_end(b, q + 1, n)
        if r - (q + 1) > _MAX_NAME:
            return -1
        q = r
    if q < n and b[q] == _GT:
        return q + 1
    return -1


@njit(cache=True, nogil=True)
def _scan(b):
    n = b.size
    p = 0
    longest = 0
    while True:
        start = p
        while p < n and (b[p] == _SP or b[p] == _NL or b[p] == _CR):
            p += 1
        if p == n:
            return -1, longest
        if b[p] != _LT:
            return p, longest
        q = _item_end(b, p, n)
        if q < 0:
            return p, longest
        if q - start > longest:
            longest = q - start
        p = q


def grammar_scan(data: bytes) -> tuple[int, int]:
    """(where the first item `tokenizer._DOC` cannot read starts, or -1 when it reads the whole text; the
    longest whitespace-plus-item stretch read)."""
    stop, longest = _scan(np.frombuffer(data, np.uint8))
    return int(stop), int(longest)
