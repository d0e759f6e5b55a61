"""Imported once by the embedded worker's fork server (workers.embedded): every job process forked from it
starts with the job kinds, the tasks and the compiled kernels already loaded."""
from services.jobs.kinds import compiling, evaluation, revision  # noqa: F401
from services.jobs.kinds.plan import alltoall, fabric, finish, schedules, select  # noqa: F401
from services.synthesis.bfb import degraded  # noqa: F401  (plan revisions: BFB, greedy, the comparison)
from services.compiler.warm import warm
from services.synthesis.search import construct, finder  # noqa: F401
from workers import tasks  # noqa: F401

warm()
