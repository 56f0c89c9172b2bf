"""Deciding who gets which nodes: the allocator's problem in, placements out (:mod:`.decider`), from
what the manager knows of each job's speed (:mod:`.curvebook`: the profiling advisor, priors, rescale
costs; + :mod:`.growstarts`, a grow's newcomers timed warm and cold), learned from the jobs'
progress datagrams (:mod:`.intake`: authenticated, deduplicated, turned into rates; the gaps
they show are measured by ``jobs.resize.gaps``)."""
