"""`fabricplan worker` that holds the first plan schedule stage it runs, for the worker end-to-end tests'
crashes (tests/workers/test_scaled_deployment.py): a test kills the worker at a known point of a small plan instead of
racing a 1024-rank plan's long schedule stage.

    HELD_WORKER_MARKER=<path> python -m tests.held_worker worker ...     (the arguments of `fabricplan worker`)

The schedule stage (services.jobs.kinds.plan.schedules.stage_schedules) has recorded its progress ("schedule",
"building schedules") when it calls construct_collectives; there the first pool process to get there
creates <path> (O_EXCL: once across every worker sharing the path) and sleeps until it is killed (at most
HOLD_S). Every later call, in the redelivered task of a fresh pool process or of another worker, finds the
marker and builds the schedules as usual. Nothing of the service is changed: the patch lives in this
process and the pool processes forked from it.
"""
from __future__ import annotations

import os
import sys
import time

HOLD_S = 300.0


def _hold_once(build):
    marker = os.environ["HELD_WORKER_MARKER"]

    def held(*args, **kwargs):
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return build(*args, **kwargs)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        time.sleep(HOLD_S)                    # killed here by the test
        return build(*args, **kwargs)

    return held


def main() -> int:
    from services.cli import main as cli_main
    from services.jobs.kinds.plan import schedules

    schedules.construct_collectives = _hold_once(schedules.construct_collectives)
    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
