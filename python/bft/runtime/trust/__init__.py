"""What the runtime trusts: :mod:`.addresses` (the one check of every address something listens on)
and :mod:`.files` (files and directories only from their own user, no symbolic links)."""
