"""Real TensorFlow training runs (train.py, tf_loops.py) and predicting them from micro-benchmarks (predict.py)."""
