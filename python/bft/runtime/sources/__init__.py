"""Where nodes come from. :mod:`.base` is the node-source interface and the registry of sources
(built-in and entry points); :mod:`.local` the virtual nodes of this host (+ :mod:`.emulated`, the
emulated training job its load tests run); :mod:`.slurm` the Slurm source (+ :mod:`.slurm_commands`,
the Slurm commands it runs); :mod:`.pilot_reports` the scheduler-neutral listener of pilots' signed
start/term reports (the pilot program itself runs on the node: :mod:`bft.runtime.onnode.pilot`)."""
