"""``stratus local``: a whole cluster on this machine, the demo and the example feeders."""
