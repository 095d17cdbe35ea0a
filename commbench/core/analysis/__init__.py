"""Analysis of what a run measured: a cluster's topology, and which host, switch, uplink or cable
explains its slow pairs."""
