"""A transformer copied with another shape prices the new shape (its cached FLOP and parameter counts are not
carried over) and is validated like any other."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.synthesis.evaluate.transformer import LLM_CATALOG, Transformer


def _fresh(m: Transformer) -> Transformer:
    return Transformer(**m.model_dump())


def test_copy_computes_its_own_counts():
    m = LLM_CATALOG["llama3-405b"].model
    short = m.forward_flops_per_token()                 # cached on m
    long = m.model_copy(update={"seq_len": 131072})
    assert long.seq_len == 131072
    assert long.forward_flops_per_token() == _fresh(long).forward_flops_per_token() > short
    wide = m.model_copy(update={"layers": 2 * m.layers})
    assert wide.parameters == _fresh(wide).parameters > m.parameters
    assert m.model_copy() == m


def test_copy_is_validated():
    m = LLM_CATALOG["llama3-8b"].model
    with pytest.raises(ValidationError, match="multiple of heads"):
        m.model_copy(update={"heads": 33})
