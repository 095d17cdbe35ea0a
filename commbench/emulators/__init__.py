"""Emulators of how TensorFlow trains in parallel: parameter servers (ps.py)."""
