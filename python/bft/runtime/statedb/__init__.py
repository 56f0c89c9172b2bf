"""The manager's state on disk: the SQLite store (:mod:`.store`), its tables, versions, job states and
checks (:mod:`.schema`), and what a job is made of, checked (:mod:`.jobspec`: name, curve,
configurations)."""
