"""The CLI's progress bar (issue 25): on stderr when it is a terminal, nothing otherwise."""
from __future__ import annotations

import io
import json

from services.cli import main, progress_bar


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_on_a_terminal_and_silent_otherwise():
    tty, pipe = _Tty(), io.StringIO()
    with progress_bar("compiling allreduce", stream=tty) as progress:
        for i in range(3):
            progress(f"candidate {i}")
    with progress_bar("compiling allreduce", stream=pipe) as progress:
        progress("candidate 0")
    assert "compiling allreduce" in tty.getvalue() and "3candidate" in tty.getvalue() and "candidate 2" in tty.getvalue()
    assert pipe.getvalue() == ""


def test_compile_prints_no_bar_when_stderr_is_not_a_terminal(capsys, tmp_path):
    out = tmp_path / "ar.xml"
    code = main(["compile", "circulant(8, 1, 2)", "--collective", "allreduce", "-o", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0 and out.stat().st_size > 0
    assert json.loads(captured.out)["runtime"]
    assert "compiling" not in captured.err and "\r" not in captured.err


def test_frontier_sweep_draws_a_bar_per_priced_candidate_on_a_terminal(monkeypatch, capsys):
    """The frontier sweep advances the bar once per candidate it prices (the finder's PRICED hook), on a
    terminal only; the printed frontier is the same either way."""
    from services.synthesis.search import finder

    finder._state.cache_clear()
    finder._collective_frontier.cache_clear()
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["frontier", "12", "2", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "frontier N=12 d=2" in tty.getvalue() and "candidate" in tty.getvalue()
    finder._state.cache_clear()
    finder._collective_frontier.cache_clear()
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert main(["frontier", "12", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == shown
