"""Stage 5, fit: the MSCCL program that fits a runtime's limits at the least predicted cost (`search`), refusing
candidates early from bounds computed on the lowered schedule alone (`bounds`)."""
