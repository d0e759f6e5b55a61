"""The column checker (services.compiler.check.scan + msccl_columns) gives the same report as the element reader
(check_msccl(..., scanner=False)) on compiled files and on a few hundred corruptions of them, and refuses
malformed files with the element reader's message."""
from __future__ import annotations

import json
import random
import re
from functools import lru_cache

import pytest

from services.cli import main
from services.compiler import compile_schedule
from services.compiler.check.msccl import check_msccl
from services.compiler.check.scan import scan_columns
from services.synthesis.schedule.ir import Collective
from services.synthesis.search.construct import construct_collectives

AG, RS, AR = Collective.ALLGATHER, Collective.REDUCESCATTER, Collective.ALLREDUCE
FILES = [("ring(4)", AR, {"runtime": "executor"}), ("ring(4)", AG, {"runtime": "legacy"}),
         ("ring(4)", RS, {"runtime": "rccl", "channels": 2}), ("torus(2, 3)", AR, {"runtime": "legacy"})]


@lru_cache(maxsize=None)
def xml_of(expr: str, c: Collective, **kw) -> str:
    r = construct_collectives(expr)[c]
    return compile_schedule(r.schedule, r.topology, "msccl", **kw).xml


def both(text: str, **kw):
    fast, slow = check_msccl(text, **kw), check_msccl(text, scanner=False, **kw)
    assert fast == slow, (fast, slow)
    return fast


@pytest.mark.parametrize("expr,c,kw", FILES)
def test_compiled_files_are_scanned_and_agree(expr, c, kw):
    text = xml_of(expr, c, **kw)
    assert scan_columns(text.encode()) is not None
    rep = both(text, runtime=kw["runtime"])
    assert rep.ok and rep.simulated
    rep = both(text, runtime=kw["runtime"], simulate_max_steps=1)      # the deadlock proof on columns
    assert rep.ok and not rep.simulated and "not simulated" in rep.warnings[-1].message


INTS = ["-2", "-1", "0", "1", "2", "3", "7", "64", "40000", "1000000000000000000", "x", "1_0", " 1", "+1", ""]
VALUES = {"type": ["s", "r", "nop", "re", "rrc", "cpy", "rcs", "rrcs", "rrs", "zz"], "srcbuf": ["i", "o", "s", "x"],
          "dstbuf": ["i", "o", "s", "x"]}


def _mutate(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    k = rng.randrange(len(lines))
    what = rng.randrange(10)
    if what < 6:                                            # one attribute of a step, tb or gpu line
        attrs = list(re.finditer(r' (\w+)="([^"]*)"', lines[k]))
        if attrs and "<algo" not in lines[k]:
            m = rng.choice(attrs)
            v = rng.choice(VALUES.get(m.group(1), INTS))
            lines[k] = lines[k][:m.start(2)] + v + lines[k][m.end(2):]
    elif what == 6:
        del lines[k]
    elif what == 7:
        lines.insert(k, lines[k])
    elif what == 8 and k + 1 < len(lines):
        lines[k], lines[k + 1] = lines[k + 1], lines[k]
    else:
        lines[k] = lines[k].replace("<step", "<step", 1) + rng.choice(["", "<!-- note -->", "\t", "x"])
    return "\n".join(lines)


@pytest.mark.parametrize("expr,c,kw", FILES)
def test_corruptions_agree(expr, c, kw):
    """Random single corruptions (attribute values, dropped, doubled or swapped lines, stray text): the column
    path and the element path report the same findings."""
    text = xml_of(expr, c, **kw)
    rng = random.Random(f"{expr}{c}")
    bad = 0
    for _ in range(60):
        rep = both(_mutate(text, rng), runtime=kw["runtime"])
        bad += not rep.ok
    assert bad > 20                                          # most corruptions are caught


def test_malformed_files_are_refused_with_the_tokenizer_message():
    text = xml_of("ring(4)", AR, runtime="executor")
    step = text.index("<step")
    cases = {
        "truncated": (text[:text.index("</gpu>")], "unterminated"),
        "cut in a tag": (text[:step + 30], "Unexpected EOF"),
        "nesting": (text.replace("</tb>", "</gpu>", 1), "XML Mismatch"),
        "non-ASCII": (text.replace('type="s"', 'type="ş"', 1), "not one the executor runtime executes"),
        "entity": (text.replace('cnt="1"', 'cnt="&#49;"', 1), "'&#49;'"),      # not decoded (NCCL does not)
        "huge number": (text.replace('srcoff="3"', 'srcoff="99999999999999999999"', 1), "outside the declared"),
        "single quote": (text[:step] + text[step:].replace('cnt="1"', "cnt='1'", 1), "single-quoted"),
        "tab": (text.replace("\n    <tb", "\n\t<tb", 1), "expecting '<'"),
        "text": (text.replace("</tb>", "</tb>x", 1), "expecting '<'"),
    }
    for name, (bad, words) in cases.items():
        rep = both(bad, runtime="executor")
        assert not rep.ok and words in rep.errors[0].message, (name, rep.errors)


@pytest.mark.parametrize("old,new", [('nchannels="1"', 'nchannels="999999999999999999"'),
                                     ('i_chunks="1"', 'i_chunks="999999999999999999"'),
                                     ('cnt="1"', 'cnt="999999999999999999"'),
                                     ('depid="-1"', 'depid="999999999999999999"'),
                                     ('srcoff="0"', 'srcoff="-999999999999999999"')])
def test_huge_values_agree(old, new):
    """18-digit values (the most the scanner reads; longer ones go to the element reader) overflow nothing."""
    text = xml_of("ring(4)", AG, runtime="legacy")
    assert old in text
    both(text.replace(old, new), runtime="legacy")
    both(text.replace(old, new.replace('="', '="9')), runtime="legacy")


def test_cli_reads_bytes_or_text_alike(tmp_path, capsys):
    """The CLI hands an ASCII file's bytes to the checker, and reads any other file as text (newlines translated),
    as before: the same verdict for CRLF line ends and a non-ASCII comment; a file that is not UTF-8 is refused."""
    text = xml_of("ring(4)", AR, runtime="executor")
    variants = {"plain": text.encode(), "crlf": text.replace("\n", "\r\n").encode(),
                "non-ascii": text.replace("<gpu", "<!-- é --><gpu", 1).encode(),
                "broken": text.replace('cnt="1"', 'cnt="2"', 1).encode()}
    verdicts = {}
    for name, data in variants.items():
        path = tmp_path / f"{name}.xml"
        path.write_bytes(data)
        code = main(["compile", str(path), "--check", "--runtime", "executor", "--json"])
        verdicts[name] = (code, json.loads(capsys.readouterr().out)["ok"])
    assert verdicts == {"plain": (0, True), "crlf": (0, True), "non-ascii": (0, True), "broken": (1, False)}
    path = tmp_path / "latin1.xml"
    path.write_bytes(text.replace("<gpu", "<!-- \xe9 --><gpu", 1).encode("latin-1"))
    assert main(["compile", str(path), "--check"]) == 2
    assert "cannot read" in capsys.readouterr().err


def _all_hasdep(text: str) -> str:
    return re.sub(r'(type="(?!nop)[a-z]+"[^\n]*)hasdep="0"', r'\1hasdep="1"', text)


@pytest.mark.parametrize("runtime,edit", [
    ("executor", lambda t: t.replace('cnt="1"', 'cnt="0"')),                   # cnt=0 on every gpu, in order
    ("executor", _all_hasdep),                                                 # steps no one waits for
    ("executor", lambda t: t.replace('nchannels="1"', 'nchannels="3"', 1)),    # channels declared, not used
    ("legacy", lambda t: t.replace('nchannels="1"', 'nchannels="40"', 1)),     # beyond the runtime's channels
    ("executor", lambda t: t.replace('i_chunks="1"', 'i_chunks="2"')),         # more input than the collective's
])
def test_warnings_agree(runtime, edit):
    """Files the column rules accept with warnings: the same warnings, in the same order."""
    text = edit(xml_of("ring(4)", AG, runtime=runtime))
    assert scan_columns(text.encode()) is not None
    rep = both(text, runtime=runtime)
    assert rep.warnings
