"""Tests for services.synthesis.topology.expr: the topology-expression grammar (DESIGN section 3).

`str(parse(s)) == s` for canonical strings; whitespace is ignored; malformed input raises ExprError naming
the 0-based position and the expected token.
"""
from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.synthesis.topology.expr import Expr, ExprError, parse

# ----- canonical round trip --------------------------------------------------------------------------

CANONICAL = [
    "complete(5)",
    "bipartite(4)",
    "ring(7, 2)",
    "hamming(2, 3)",
    "torus(3, 3, 2)",
    "circulant(16, 3, 4)",
    "twisted_torus(8, 4, 1)",
    "distreg(odd4)",
    "distreg(gh33_incidence)",
    "edges(3, 0>1, 1>2, 2>0)",
    "edges(2, 0>1, 1>0)",
    "line(complete(5))",
    "line(complete(5), 3)",
    "line(line(bipartite(2)))",
    "degree(biring(5), 2)",
    "power(circulant(16, 3, 4), 2)",
    "product(ring(4), ring(8))",
    "power(product(ring(4), ring(8)), 2)",
    "line(power(product(distreg(odd4), edges(2, 0>1, 1>0)), 2), 2)",
    "f()",
    "f(g(), h(x))",
    "f(-3, -1>-2)",
]


@pytest.mark.parametrize("text", CANONICAL)
def test_canonical_round_trip(text):
    tree = parse(text)
    assert isinstance(tree, Expr)
    assert str(tree) == text
    assert parse(str(tree)) == tree


def test_tree_structure_of_nested_expression():
    tree = parse("line(power(product(distreg(odd4), edges(2, 0>1, 1>0)), 2), 3)")
    assert tree.name == "line"
    assert len(tree.args) == 2 and tree.args[1] == 3
    power = tree.args[0]
    assert power == Expr("power", (Expr("product", (
        Expr("distreg", ("odd4",)),
        Expr("edges", (2, (0, 1), (1, 0))),
    )), 2))


def test_argument_kinds():
    assert parse("distreg(odd4)").args == ("odd4",)           # a bare name is a symbolic str argument
    assert parse("edges(3, 0>1, 1>2, 2>0)").args == (3, (0, 1), (1, 2), (2, 0))
    assert parse("f(g())").args == (Expr("g", ()),)          # name followed by '(' is an expression
    assert parse("f(g)").args == ("g",)
    assert parse("f(-7)").args == (-7,)
    assert parse("complete()") == Expr("complete", ())
    arg = parse("complete(5)").args[0]
    assert type(arg) is int


@pytest.mark.parametrize("text,canonical", [
    ("complete( 5 )", "complete(5)"),
    ("  complete(5)  ", "complete(5)"),
    ("complete (5)", "complete(5)"),
    ("ring(7,2)", "ring(7, 2)"),
    ("ring(7 ,\t2)", "ring(7, 2)"),
    ("line(\n complete(5) ,\n 3\n)", "line(complete(5), 3)"),
    ("edges(3,0>1,1>2,2>0)", "edges(3, 0>1, 1>2, 2>0)"),
    ("edges( 3 , 0 > 1 , 1 >2, 2> 0 )", "edges(3, 0>1, 1>2, 2>0)"),
    ("distreg( odd4 )", "distreg(odd4)"),
    ("power(product(ring(4),ring(8)),2)", "power(product(ring(4), ring(8)), 2)"),
    ("f( )", "f()"),
])
def test_whitespace_variants_are_canonicalized(text, canonical):
    assert str(parse(text)) == canonical
    assert parse(text) == parse(canonical)


# ----- errors ---------------------------------------------------------------------------------------

# (text, position, a fragment of `expected`, a fragment of `found`)
MALFORMED = [
    ("", 0, "topology name", "end of input"),
    ("complete(5", 10, "')'", "end of input"),                  # missing close paren
    ("line(complete(5)", 16, "')'", "end of input"),
    ("complete", 8, "'('", "end of input"),                    # missing open paren
    ("complete(5) x", 12, "end of input", "'x'"),               # trailing junk
    ("complete(5))", 11, "end of input", "')'"),
    ("complete(5,)", 11, "an integer, a name or an expression", "')'"),   # empty argument
    ("complete(,5)", 9, "an integer, a name or an expression", "','"),
    ("ring(5,,2)", 7, "an integer, a name or an expression", "','"),
    ("complete(5$)", 10, "a name, an integer", "'$'"),           # bad character
    ("complete(5) ; ", 12, "a name, an integer", "';'"),
    ("complete(-)", 9, "a name, an integer", "'-'"),
    ("(5)", 0, "topology name", "'('"),
    ("5", 0, "topology name", "'5'"),
    ("edges(3, 0>)", 11, "arc head", "')'"),
    ("edges(3, 0>x)", 11, "arc head", "'x'"),
    ("complete(5 6)", 11, "')'", "'6'"),
]


@pytest.mark.parametrize("text,position,expected,found", MALFORMED)
def test_malformed_input_reports_position_and_expected(text, position, expected, found):
    with pytest.raises(ExprError) as info:
        parse(text)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.position == position
    assert expected in err.expected
    assert found in err.found
    assert err.text == text
    message = str(err)
    assert f"position {position}" in message
    assert err.expected in message
    assert err.found in message


def test_error_position_points_at_offending_character():
    text = "torus(3, 3, @)"
    with pytest.raises(ExprError) as info:
        parse(text)
    assert text[info.value.position] == "@"


def test_huge_integer_literal_is_an_expr_error():
    with pytest.raises(ExprError):
        parse("complete(" + "9" * 5000 + ")")


# ----- property: printing and re-parsing random trees ---------------------------------------------

NAMES = st.from_regex(re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,7}"), fullmatch=True)
INTS = st.integers(min_value=-10**6, max_value=10**6)
LEAVES = st.one_of(INTS, NAMES, st.tuples(INTS, INTS))


def _exprs(children):
    return st.builds(Expr, NAMES, st.lists(children, max_size=4).map(tuple))


ARGS = st.recursive(LEAVES, lambda children: _exprs(st.one_of(LEAVES, children)), max_leaves=20)
TREES = _exprs(ARGS)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(TREES)
def test_random_trees_round_trip(tree):
    text = str(tree)
    again = parse(text)
    assert again == tree
    assert str(again) == text


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(TREES, st.sampled_from(["", " ", "  ", "\t", "\n", " \t\n "]))
def test_random_trees_ignore_whitespace(tree, ws):
    text = str(tree)
    spaced = (ws + text.replace("(", ws + "(" + ws).replace(")", ws + ")" + ws)
              .replace(", ", ws + "," + ws).replace(">", ws + ">" + ws) + ws)
    assert parse(spaced) == tree
