"""How people and tools reach a running manager: the control socket (:mod:`.control`), ``bft status``'s
view (:mod:`.status`), the keeper that outlives the manager (:mod:`.keeper`: the store and report
socket the jobs use), Prometheus metrics (:mod:`.metrics`; + :mod:`.metrics_http`, the endpoint's
bounded server), and ``bft report`` (:mod:`.report_command`, the command; :mod:`.accounting`, its
accounting; + :mod:`.accounting_input`, other users' state files read as untrusted data, and
:mod:`.sacct_wait`, the main jobs' added wait from sacct)."""
