"""Real TensorFlow training runs (train.py, tf_loops.py) and predicting them from micro-benchmarks:
the model (model.py), what it reads (evidence.py), its calibration (calibration.py), its row
(predict_rows.py) and the command (predict.py)."""
