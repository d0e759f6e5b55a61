"""The XML tokenizer of every MSCCL runtime (NCCL's hand-written parser, shared by msccl-executor-nccl,
RCCL and microsoft/msccl): which files it accepts and the tree it builds.

The rules, as the runtimes implement them (executor src/misc/msccl/msccl_parser.cc:18-209, RCCL the same
lines, microsoft/msccl src/graph/xml.cc:20-211):

- between elements only spaces, newlines and carriage returns (a tab or any text is "expecting '<'");
- an element name or attribute name ends at a space, '>', '/', newline or carriage return, and is at most
  253 characters; '=' in an element name is an error;
- attributes are separated by single spaces and written key="value": a value must start with a quote and
  runs to the next double quote, so single-quoted values swallow what follows; after the closing quote
  comes a space, '/' or '>' (a newline inside a tag is "expected >, got '\\n'", so an element sits on one
  line); the first 16 attributes are kept, later ones ignored; values longer than 255 characters overflow
  the parser's buffer;
- `<?xml ...?>` is read as an element `?xml` whose last attribute is followed by '?': "expected >";
- comments `<!-- ... -->` are skipped anywhere between elements (their first word must not contain '=');
- closing tags are `</name>` with nothing after the name.

`scan(text)` returns the tree (elements with .tag, .attrib, iteration over children, like ElementTree)
and the findings, each with the line, the column and the runtime's own message.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from ..errors import Finding
from .grammar import grammar_scan

__all__ = ["Node", "scan", "lexical_findings", "opening_tag", "MAX_ATTRS"]

MAX_ATTRS = 16
MAX_NAME = 253
MAX_VALUE = 255
_TERM = " >/\n\r"

_NAME = r"[^= >/\n\r]{0,253}"
_ATTR = r' [^= >/\n\r"]{1,253}="[^"]{0,255}"'
_OPEN = rf"<(?!!--){_NAME}(?:{_ATTR})*(?:/[^= >/\n\r]{{0,253}})?>"
_CLOSE = rf"</{_NAME}>"
_COMMENT = r"<!--(?: (?s:.*?)-->|-->)"
_DOC = re.compile(rf"(?:[ \n\r]*(?:{_COMMENT}|{_CLOSE}|{_OPEN}))*[ \n\r]*")
_TOKEN = re.compile(r"[^= >/\n\r]*")
_WS = re.compile(r"[ \n\r]*")


class Node:
    """One element as the runtime's parser sees it (ElementTree-like: tag, attrib, get, iteration)."""

    __slots__ = ("tag", "attrib", "children", "line")

    def __init__(self, tag: str, attrib: dict, line: int):
        self.tag, self.attrib, self.children, self.line = tag, attrib, [], line

    def get(self, key: str, default=None):
        return self.attrib.get(key, default)

    def __iter__(self):
        return iter(self.children)

    def __len__(self) -> int:
        return len(self.children)


class _Error(Exception):
    def __init__(self, pos: int, msg: str):
        super().__init__(msg)
        self.pos, self.msg = pos, msg


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


def _char(text: str, pos: int) -> str:
    if pos >= len(text):
        raise _Error(pos, "Unexpected EOF")
    return text[pos]


def _token(text: str, pos: int, *, allow_value: bool) -> tuple[str, str | None, str, int]:
    """The runtime's GetToken: (name, value or None, last char, position after it)."""
    m = _TOKEN.match(text, pos)
    name, end = m.group(), m.end()
    if len(name) >= MAX_NAME + 1:
        raise _Error(pos, f"name {name[:40]}... too long (max {MAX_NAME + 2})")
    c = _char(text, end)
    if c != "=":
        return name, None, c, end + 1
    if not allow_value:
        raise _Error(end, f"Unexpected value with name {name}")
    q = _char(text, end + 1)
    if q not in "\"'":
        raise _Error(end + 1, "Expected (double) quote.")
    close = text.find('"', end + 2)
    if close < 0:
        raise _Error(len(text), "Unexpected EOF")
    value = text[end + 2:close]
    if q == "'":
        raise _Error(end + 1, f"single-quoted value: the parser reads {name}= up to the next double quote "
                              f"({value[:30]!r}...)")
    if len(value) > MAX_VALUE:
        raise _Error(end + 2, f"value of {name} is {len(value)} characters; the parser's buffer holds {MAX_VALUE}")
    return name, value, _char(text, close + 1), close + 2


def _node(text: str, pos: int):
    """The runtime's GetNode: (kind, name, attrs, pos) with kind none/open/close/single."""
    pos = _WS.match(text, pos).end()
    if pos >= len(text):
        return "none", "", [], pos
    c = text[pos]
    if c != "<":
        shown = {"\t": "\\t"}.get(c, c)
        raise _Error(pos, f"expecting '<', got '{shown}'")
    start = pos + 1
    name, _, last, pos = _token(text, start, allow_value=False)
    if name.startswith("!--"):
        k = text.find("-->", max(start + 3, pos - 3))
        if k < 0:
            raise _Error(start - 1, "unterminated comment")
        return _node(text, k + 3)
    if name == "" and last == "/":
        name, _, last, pos = _token(text, pos, allow_value=False)
        if last != ">":
            raise _Error(pos - 1, f"unexpected trailing {last!r} in closing tag {name}")
        return "close", name, [], pos
    attrs = []
    while last == " ":
        key, value, last, pos = _token(text, pos, allow_value=True)
        if len(attrs) < MAX_ATTRS:
            attrs.append((key, "" if value is None else value))
    kind = "open"
    if last == "/":
        kind = "single"
        _, _, last, pos = _token(text, pos, allow_value=False)
    if last != ">":
        shown = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(last, last)
        raise _Error(pos - 1, f"expected >, got '{shown}'")
    return kind, name, attrs, pos


def opening_tag(tag: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(name, attributes in order) of `tag`, one opening tag `<name k="v" ...>`, as the tokenizer reads it (the
    first MAX_ATTRS attributes, the ones it keeps); None when it reads something else or refuses it."""
    try:
        kind, name, attrs, end = _node(tag, 0)
    except _Error:
        return None
    return (name, attrs) if kind == "open" and end == len(tag) else None


def _slow(text: str) -> tuple[Node | None, list[Finding]]:
    root = Node("#document", {}, 0)
    stack = [root]
    pos = 0
    try:
        while True:
            at = pos
            kind, name, attrs, pos = _node(text, pos)
            if kind == "none":
                if len(stack) > 1:
                    raise _Error(pos, f"unterminated {stack[-1].tag}")
                break
            if kind == "close":
                if len(stack) == 1:
                    continue
                if name != stack[-1].tag:
                    raise _Error(at, f"XML Mismatch : {stack[-1].tag} / {name}")
                stack.pop()
                continue
            d: dict = {}
            for k, v in attrs:
                d.setdefault(k, v)            # GetAttrIndex returns the first match
            node = Node(name, d, text.count("\n", 0, at) + 1)
            stack[-1].children.append(node)
            if kind == "open":
                stack.append(node)
    except _Error as e:
        return None, [Finding("lexical", f"{_where(text, e.pos)}: {e.msg}")]
    return root, []


_DOC_BYTES = re.compile(_DOC.pattern.encode("ascii"))
WINDOW = 1 << 20                # characters matched at once (re's backtracking stack grows with the match)
MAX_WINDOW = 1 << 24


def _grammar_stop(text: str | bytes) -> int:
    """-1 when the whole text is a sequence of elements, closing tags and comments the tokenizer reads
    (`_DOC.fullmatch(text)`), else where the first item it cannot read starts. Matched window by window: a
    window's match ends after its last complete item and the next window starts there. An item is decided by
    its own characters (a tag ends at its first '>' outside quotes, a comment at its first '-->'), so the
    verdict is that of one match over the whole text, in memory bounded by the window (re's backtracking
    stack grows with the length of a match)."""
    pattern = _DOC_BYTES if isinstance(text, bytes) else _DOC
    pos, n, window = 0, len(text), WINDOW
    while pos < n:
        end = min(n, pos + window)
        m = pattern.match(text, pos, end)
        stop = m.end() if m else pos
        if stop == n:
            return -1
        if stop > pos:
            pos, window = stop, WINDOW
        elif end == n or window >= MAX_WINDOW:
            return pos                      # unreadable here (or an item longer than MAX_WINDOW)
        else:
            window *= 2
    return -1


def scan(text: str) -> tuple["Node | ET.Element | None", list[Finding]]:
    """(document node whose children are the top-level elements, findings). The fast path checks the whole
    text against the tokenizer's grammar with one regular expression and builds the tree with ElementTree;
    anything unusual (or an error, to locate it) goes through a faithful re-implementation of the
    tokenizer."""
    if "&" not in text and _grammar_stop(text) < 0:           # ElementTree would decode entities; NCCL does not
        try:
            doc = ET.fromstring(f"<document>{text}</document>")
        except ET.ParseError:
            pass
        else:
            for el in doc.iter():
                if len(el.attrib) > MAX_ATTRS:
                    el.attrib = {k: el.attrib[k] for k in list(el.attrib)[:MAX_ATTRS]}
            return doc, []
    return _slow(text)


def lexical_findings(text: str | bytes) -> list[Finding]:
    """Only the tokenizer's verdict (no tree): [] when the runtimes' parser reads every element of `text`
    (a str, or the file's bytes). Files the compiled automaton (`grammar`) reads whole, with every item in
    a window, are accepted there (the same verdict, tests/compiler/check/test_grammar.py); anything else goes
    through the regular expression, which also locates the error."""
    data = text if isinstance(text, bytes) else text.encode("ascii") if text.isascii() else None
    if data is not None:
        stop, longest = grammar_scan(data)
        if stop < 0 and longest <= MAX_WINDOW:
            return []
    stop = _grammar_stop(text)
    if stop < 0:
        return []
    # the tokenizer from the last item read (its line numbers shifted), over at most MAX_WINDOW characters
    part = text[stop:stop + MAX_WINDOW]
    if isinstance(text, bytes):
        part = part.decode("utf-8", errors="replace")
    nl = b"\n" if isinstance(text, bytes) else "\n"
    lines_before, line_start = text.count(nl, 0, stop), text.rfind(nl, 0, stop) + 1
    found = _slow(part)[1]
    for f in found:
        m = re.match(r"line (\d+), column (\d+)", f.message)
        if m and stop:
            line, col = int(m.group(1)), int(m.group(2))
            col += stop - line_start if line == 1 else 0
            f.message = f"line {line + lines_before}, column {col}" + f.message[m.end():]
    return found
