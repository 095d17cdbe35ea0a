"""The run: its world (rendezvous, groups' collectives), security (token, gate), framing, watchdog, session."""
