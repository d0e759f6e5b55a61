"""Imported once by the embedded worker's fork server (workers.embedded): every job process forked from it
starts with the job kinds, the tasks and the compiled kernels already loaded. The fork server starts in the
background while the API answers; on the first start after an install numba compiles the kernels here, and
each step it compiled is printed (services.compiler.warm)."""
from services.jobs.kinds import compiling, evaluation, revision  # noqa: F401
from services.jobs.kinds.plan import alltoall, fabric, finish, schedules, select  # noqa: F401
from services.synthesis.bfb import degraded  # noqa: F401  (plan revisions: BFB, greedy, the comparison)
from services.compiler.warm import slow_steps, warm
from services.synthesis.search import construct, finder  # noqa: F401
from workers import tasks  # noqa: F401

warm(slow_steps())
