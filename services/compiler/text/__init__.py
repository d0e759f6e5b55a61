"""Stage 3, text: XML written from integer columns by compiled kernels (`xmltext`), and the oneCCL compiler
(`oneccl`, schedule -> per-rank instruction lists -> XML)."""
