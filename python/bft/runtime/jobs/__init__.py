"""Running jobs: what the manager tracks of each (:mod:`.runs`), carrying out decisions and judging
ended generations (:mod:`.lifecycle`, with its resize state machine and methods in :mod:`.resize`,
and the I/O of a method's steps for one job in :mod:`.steps`), a job's worker processes
(:mod:`.workers`), their command lines and environment (:mod:`.launcher`), warm standbys
(:mod:`.standbys`), hung in-place workers found by their heartbeats (:mod:`.heartbeats`), finding
and ending the processes the manager started (:mod:`.processes`), and a job's directory and logs
(:mod:`.files`)."""
