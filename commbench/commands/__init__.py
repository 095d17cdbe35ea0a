"""Commands that read results files rather than run benchmarks (each module: ``add_parser``, its run)."""
