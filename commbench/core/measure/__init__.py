"""Measurement: timed loops and statistics, buffers, messages, payloads, sizes, outliers."""
