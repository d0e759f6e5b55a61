"""Stage 4, checking any MSCCL or oneCCL file against a runtime: the runtimes' tokenizer (`tokenizer`, `grammar`),
the byte scanner into columns (`scan`), the MSCCL and oneCCL validators and simulators (`msccl`, `oneccl`,
`msccl_columns`) and the deadlock proof (`deadlock`, `deadlock_kernels`)."""
