"""Stage 2, the MSCCL instruction passes (paper section 7): the message table, thread blocks, program order and
dependencies over an instruction table, with the numba kernels each pass calls beside it."""
