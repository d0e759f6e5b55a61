"""What the job kinds share (DESIGN 4.2); none of these imports a job kind.

    attempts            attempt numbers, claim, Superseded, progress, failing a job with a reason
    stage_weights       progress weights from measured stage costs, and the ETA they give
    artifacts           artifact serialisation: topology JSON and GraphML, link loads, schedule JSON, BFB blocks
    frontiers           the cached Pareto frontier
    size_sets           schedule sets by size: stored, and the predicted times they give
    alltoall_build      an all-to-all schedule built and checked for a plan or a revision
    training_iteration  a training job's iteration at given collective costs
    revision_cost       what a failure costs (predicted times, ring fallback)
    compile_stage       a plan's (and a revision's) compile stage; one file compiled and recorded
    compile_units       the files a compile stage writes
    compile_pool        compile units in forked processes within a memory budget
    file_compile        one XML file compiled, checked and stored
    early_compile       an embedded plan's main files compiled while its schedules are checked
    range_files         which schedule a size range's file holds
"""
