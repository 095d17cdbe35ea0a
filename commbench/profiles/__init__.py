"""Gradient-tensor profiles of real DNNs: reading the shipped CSVs (no TensorFlow) and making them (TensorFlow)."""
