"""Topology expressions: the one grammar that names every topology (DESIGN section 3).

Grammar (whitespace is ignored)::

    expr  := NAME '(' [arg (',' arg)*] ')'
    arg   := INT | INT '>' INT | NAME | expr

``INT '>' INT`` is an arc of an explicit edge list, ``edges(n, 0>1, 1>2, ...)``; a bare NAME is a
symbolic argument such as ``distreg(odd4)``. ``str(parse(s))`` is the canonical form: ``name(a, b)``
with one space after each comma, so ``str(parse(s)) == s`` for canonical strings.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

Arg = Union[int, str, tuple[int, int], "Expr"]
MAX_DEPTH = 50          # nesting of sub-expressions (no Python recursion limit is ever reached)


class ExprError(ValueError):
    """A malformed expression: names the position (0-based character offset) and what was expected."""

    def __init__(self, text: str, position: int, expected: str, found: str):
        self.text, self.position, self.expected, self.found = text, position, expected, found
        super().__init__(f"bad topology expression {text!r} at position {position}: "
                         f"expected {expected}, found {found}")


@dataclass(frozen=True)
class Expr:
    """A parsed expression node: a family or operator name applied to arguments."""

    name: str
    args: tuple[Arg, ...] = ()

    def __str__(self) -> str:
        return f"{self.name}({', '.join(_format_arg(a) for a in self.args)})"


def _format_arg(arg: Arg) -> str:
    if isinstance(arg, tuple):
        return f"{arg[0]}>{arg[1]}"
    return str(arg)


# ASCII only: `\d` would take any Unicode decimal digit (int("４") is 4), `\s` any Unicode space
_TOKEN = re.compile(r"\s*(?:(?P<int>-?[0-9]+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[(),>]))", re.ASCII)
_SPACE = re.compile(r"\s*", re.ASCII)


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    tokens, pos = [], 0
    while pos < len(text):
        start = _SPACE.match(text, pos).end()
        if start == len(text):
            break
        m = _TOKEN.match(text, pos)
        if not m:
            raise ExprError(text, start, "a name, an integer or one of ( ) , >", repr(text[start]))
        kind = m.lastgroup
        assert kind is not None                       # every alternative of _TOKEN is a named group
        tokens.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    tokens.append(("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.depth = 0

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.i]

    def take(self, kind: str, value: str | None = None, expected: str | None = None) -> str:
        k, v, p = self.peek()
        if k != kind or (value is not None and v != value):
            raise ExprError(self.text, p, expected or repr(value or kind), _describe(k, v))
        self.i += 1
        return v

    def expr(self) -> Expr:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(self.text, self.peek()[2], f"at most {MAX_DEPTH} nested expressions", "deeper nesting")
        name = self.take("name", expected="a topology name")
        self.take("punct", "(", expected="'('")
        args: list[Arg] = []
        if self.peek()[:2] != ("punct", ")"):
            args.append(self.arg())
            while self.peek()[:2] == ("punct", ","):
                self.i += 1
                args.append(self.arg())
        self.take("punct", ")", expected="',' or ')'")
        self.depth -= 1
        return Expr(name, tuple(args))

    def arg(self) -> Arg:
        k, v, p = self.peek()
        if k == "int":
            if len(v.lstrip("-")) > 18:
                raise ExprError(self.text, p, "an integer below 10^18", repr(v[:12] + "..."))
            self.i += 1
            if self.peek()[:2] == ("punct", ">"):
                self.i += 1
                head = self.take("int", expected="an integer (arc head)")
                if len(head.lstrip("-")) > 18:
                    raise ExprError(self.text, self.tokens[self.i - 1][2], "an integer below 10^18", "a longer one")
                return (int(v), int(head))
            return int(v)
        if k == "name":
            if self.tokens[self.i + 1][:2] == ("punct", "("):
                return self.expr()
            self.i += 1
            return v
        raise ExprError(self.text, p, "an integer, a name or an expression", _describe(k, v))


def _describe(kind: str, value: str) -> str:
    return "end of input" if kind == "end" else repr(value)


def parse(text: str) -> Expr:
    """Parse a topology expression; raises ExprError naming the position and the expected token."""
    parser = _Parser(text)
    tree = parser.expr()
    parser.take("end", expected="end of input")
    return tree
