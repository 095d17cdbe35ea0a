"""The parts of ``commbench cluster`` (benchmarks/cluster.py): its schedules, the worker every rank
runs for a task, the conductor rank 0 runs, the declared tests, and --resume."""
