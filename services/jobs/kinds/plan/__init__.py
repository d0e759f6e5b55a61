"""The plan job (DESIGN 4.2): a Celery chain of stages (workers.tasks), one module per family of them:

    select      frontier -> selection (a training job's selection: training)
    fabric      hosts, ports and panel configs on the fabric the request names
    schedules   schedules (BFB, fanned out in receiver blocks when large) -> verification -> artifacts
                (embedded: the main XML files compile meanwhile, services.jobs.stages.early_compile);
                alltoall: the all-to-all schedule when the workload has one
    (the compile stage is services.jobs.stages.compile_stage's, shared with revisions)
    finish      predicted times and baselines; the plan done

Each stage is a plain function over the database (services.store) and the synthesis library. Stages are
idempotent: a redelivered task repeats its stage harmlessly, artifacts are content-addressed, and a finished
plan is never changed again. Every write claims the plan for the task's attempt (services.jobs.stages.attempts).
"""
