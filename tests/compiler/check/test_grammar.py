"""The compiled tokenizer automaton (services.compiler.check.grammar) against the runtimes' grammar as a regular
expression (tokenizer._DOC): the same verdict and the same first unreadable item on random documents, built
from the bytes the grammar turns on (names and values at their length limits, comments, quotes, slashes)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.compiler.check import tokenizer
from services.compiler.check.grammar import grammar_scan

TOKENS = ["<", ">", "/", "!", "-", "--", "-->", "<!--", "<!-- ", " ", "\n", "\r", "\t", "=", '"', "a", "b",
          "?", "k\"", "x" * 126, "y" * 127, "é", '="', "<a", "</a>", "<b/>", ' k="v"', '<step s="1" type="r"/>']


def regex_stop(data: bytes) -> int:
    m = tokenizer._DOC_BYTES.match(data)
    return -1 if m.end() == len(data) else m.end()


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_same_verdict_as_the_regular_expression(parts):
    data = "".join(parts).encode("utf-8")
    stop, longest = grammar_scan(data)
    assert stop == regex_stop(data)
    assert longest <= len(data)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(['<a k="v">', "<b/>", "</a>", "<!-- c -->", "<!---->", " ", "\n"]), max_size=30),
       st.integers(0, 3))
def test_documents_of_readable_items_are_accepted(parts, cut):
    data = "".join(parts).encode("ascii")
    assert grammar_scan(data)[0] == regex_stop(data) == -1
    if data.strip():
        bad = data[:len(data) - cut] + b"\t"           # a tab between elements: "expecting '<'"
        assert grammar_scan(bad)[0] == regex_stop(bad) >= 0


def test_limits_of_names_and_values():
    for name, ok in (("n" * 253, True), ("n" * 254, False)):
        for doc in (f"<{name}/>", f"</{name}>", f'<a {name}="v"/>', f"<a/{name}>"):
            assert (grammar_scan(doc.encode())[0] == -1) is ok == (regex_stop(doc.encode()) == -1)
    for value, ok in (("v" * 255, True), ("v" * 256, False)):
        doc = f'<a k="{value}"/>'.encode()
        assert (grammar_scan(doc)[0] == -1) is ok == (regex_stop(doc) == -1)
    for doc in (b'<a k"="v"/>', b'<a "k="v"/>', b'<a k="v""/>', b'<a ="v"/>', b'<a k=v/>', b'<a k="v" />',
                b'<a k="v\n>"/>', b'<!--x-->', b'<!-->', b'<!---->', b'<!-- -- -->', b'<a=b/>', b'<a/b c>'):
        assert grammar_scan(doc)[0] == regex_stop(doc), doc


def test_lexical_findings_fast_path_matches_the_slow_one():
    good = b'<algo name="x">\n  <gpu id="0">\n  </gpu>\n</algo>\n'
    assert tokenizer.lexical_findings(good) == [] == tokenizer.lexical_findings(good.decode())
    bad = good.replace(b'id="0"', b"id='0'")
    found = tokenizer.lexical_findings(bad)
    assert found and found[0].kind == "lexical"
    assert [f.message for f in found] == [f.message for f in tokenizer.lexical_findings(bad.decode())]
