"""What runs on a compute node for the manager, outside the training script: :mod:`.torchrun_agent`
(torchrun, quiet about planned stops, its stores behind the job's secret; started as
``python -m bft.runtime.agent``) and :mod:`.pilot` (the program a pilot job runs to hold its node,
sent to the batch scheduler as text). The training side of a node is :mod:`bft.train`."""
