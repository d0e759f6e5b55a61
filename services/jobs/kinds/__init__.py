"""The job kinds (DESIGN 4.2): what a worker task runs. Only workers/ and the API's dispatcher import these,
and no kind imports another (tests/project/test_import_graph.py).

    plan/        the plan job, one module per family of stages: select (frontier, selection; training,
                 hybrid), fabric, schedules (and alltoall), finish (the compile stage is
                 services.jobs.stages.compile_stage, shared with revisions)
    compiling    the on-demand compile job: one file for options no plan compiled
    evaluation   topology evaluations
    revision     plan revisions after link failures (repair, schedules, compile, finish)
"""
