"""Sparse linear programs through OR-Tools MathOpt (GLOP, or HiGHS simplex / interior point / PDLP).

One entry point for every LP of the evaluate package: minimize c x subject to row_lo <= A x <= row_hi and
x >= 0, built straight from numpy arrays into MathOpt's model protocol buffer (building a MathOpt model
variable by variable from Python costs more than solving it at these sizes). OR-Tools' model_builder
HiGHS wrapper returns row activities in place of duals, hence MathOpt.
"""
from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix

__all__ = ["SOLVERS", "LpError", "solve_lp"]

SOLVERS = ("glop", "simplex", "ipm", "pdlp")
PDLP_OPTIONS: dict[str, float] = {}   # extra HiGHS double options for PDLP, e.g. primal_feasibility_tolerance


class LpError(RuntimeError):
    """The solver returned no solution (infeasible, unbounded or out of its limits)."""


def solve_lp(c: np.ndarray, a: coo_matrix, row_hi: np.ndarray, *, row_lo: np.ndarray | None = None,
             solver: str = "simplex", time_limit_s: float | None = None):
    """minimize c x s.t. row_lo <= a x <= row_hi, x >= 0 (row_lo defaults to -inf).

    Returns (objective, x, row duals) with MathOpt's sign convention (the dual of a binding `<=` row of a
    minimization is <= 0). `solver`: "glop" (OR-Tools' simplex), or HiGHS "simplex", "ipm" (with crossover:
    a vertex) or "pdlp" (first order, accurate to about 1e-6).

    >>> import numpy as np
    >>> from scipy.sparse import coo_matrix
    >>> obj, x, _ = solve_lp(np.array([-1.0, -1.0]), coo_matrix(np.array([[1.0, 2.0], [3.0, 1.0]])),
    ...                      np.array([4.0, 6.0]))
    >>> round(obj, 9), x.round(9).tolist()
    (-2.8, [1.6, 1.2])
    """
    from ortools.math_opt import callback_pb2, model_parameters_pb2, model_pb2, parameters_pb2
    from ortools.math_opt.core.python import solver as core

    if solver not in SOLVERS:
        raise ValueError(f"unknown LP solver {solver!r}; known: {', '.join(SOLVERS)}")
    n_var, n_row = c.size, row_hi.size
    model = model_pb2.ModelProto()
    var = model.variables
    var.ids.extend(range(n_var))
    var.lower_bounds.extend(np.zeros(n_var).tolist())
    var.upper_bounds.extend(np.full(n_var, np.inf).tolist())
    var.integers.extend([False] * n_var)
    nz = np.flatnonzero(c)
    model.objective.linear_coefficients.ids.extend(nz.tolist())
    model.objective.linear_coefficients.values.extend(np.asarray(c, dtype=np.float64)[nz].tolist())
    rows = model.linear_constraints
    rows.ids.extend(range(n_row))
    lo = np.full(n_row, -np.inf) if row_lo is None else np.asarray(row_lo, dtype=np.float64)
    rows.lower_bounds.extend(lo.tolist())
    rows.upper_bounds.extend(np.asarray(row_hi, dtype=np.float64).tolist())
    m = a.tocsr()
    m.sum_duplicates()
    m.sort_indices()
    m = m.tocoo()
    mat = model.linear_constraint_matrix
    mat.row_ids.extend(m.row.tolist())
    mat.column_ids.extend(m.col.tolist())
    mat.coefficients.extend(m.data.tolist())

    params = parameters_pb2.SolveParametersProto()
    if time_limit_s is not None:
        params.time_limit.seconds = int(time_limit_s)
        params.time_limit.nanos = int((time_limit_s % 1) * 1e9)
    if solver == "glop":
        kind = parameters_pb2.SOLVER_TYPE_GLOP
    else:
        kind = parameters_pb2.SOLVER_TYPE_HIGHS
        params.highs.string_options["solver"] = solver
        if solver == "pdlp":
            for key, value in PDLP_OPTIONS.items():
                params.highs.double_options[key] = value
    result = core.solve(model, kind, parameters_pb2.SolverInitializerProto(), params,
                        model_parameters_pb2.ModelSolveParametersProto(), None,
                        callback_pb2.CallbackRegistrationProto(), None, None)
    if not result.solutions or not result.solutions[0].HasField("primal_solution"):
        raise LpError(f"{solver} returned no solution ({result.termination.reason}: {result.termination.detail})")
    sol = result.solutions[0]
    x = np.zeros(n_var)
    pv = sol.primal_solution.variable_values
    x[np.asarray(pv.ids, dtype=np.int64)] = np.asarray(pv.values, dtype=np.float64)
    y = np.zeros(n_row)
    dv = sol.dual_solution.dual_values
    y[np.asarray(dv.ids, dtype=np.int64)] = np.asarray(dv.values, dtype=np.float64)
    return float(sol.primal_solution.objective_value), x, y
