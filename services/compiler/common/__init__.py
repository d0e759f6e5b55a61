"""Array primitives every stage of the compiler uses: sort-based set operations on integer columns (`arrays`),
the radix sort behind them (`radix`, numba) and the ordered thread pool compiles split their blocks over (`pool`)."""
