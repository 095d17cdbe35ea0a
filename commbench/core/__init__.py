"""Transport-independent pieces: sizes, payloads, timing, results, the world of ranks."""
