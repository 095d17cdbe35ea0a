"""The parameter-server emulator: TensorFlow-like placement, real updates, any transport."""


import pytest

from commbench.core.errors import UsageError
from commbench.emulators.placement import place, shard_bytes
from commbench.profiles import store


def test_round_robin_and_greedy_placement_on_resnet50():
    sizes = [t.nbytes for t in store.load("resnet50").tensors]
    rr = place(sizes, 2, "round-robin")
    assert rr[:4] == [0, 1, 0, 1]
    # ResNet-50 alternates kernels and biases (and BN gammas/betas), so round-robin loads one shard
    assert shard_bytes(sizes, rr, 2) == [sum(sizes[0::2]), sum(sizes[1::2])]
    assert sum(sizes[1::2]) < 0.003 * sum(sizes)
    greedy = shard_bytes(sizes, place(sizes, 2, "greedy"), 2)
    assert sum(greedy) == sum(sizes) and abs(greedy[0] - greedy[1]) <= max(sizes)


def test_greedy_by_hand():
    # each variable on the least loaded shard so far, ties to the lower shard
    assert place([10, 10, 5, 30, 1], 3, "greedy") == [0, 1, 2, 2, 0]
    assert shard_bytes([10, 10, 5, 30, 1], [0, 1, 2, 2, 0], 3) == [11, 10, 35]


@pytest.mark.parametrize("n,p", [(0, 1), (5, 0), (3, 4)])
def test_placement_rejects(n, p):
    with pytest.raises(UsageError):
        place([4] * n, p)


def tf_ps_plans(model: str, ps: int):
    from commbench.benchmarks.ps_throughput import tf_variables
    from commbench.emulators import tf_ps

    return tf_ps.plan(tf_variables(model, None), ps)


def test_tf_mode_places_and_counts_as_tensorflow():
    """Round-robin in creation order, non-trainable variables included, then the step counter and the
    learning rate; the calls of a worker-step are what TF 2.21 made on the wire (docs/training.md)."""
    from commbench.emulators import tf_ps

    one, two = tf_ps_plans("small_cnn", 1), tf_ps_plans("small_cnn", 2)
    assert [len(p.variables) for p in two] == [5, 5] and [sum(v.conv for v in p.variables) for p in two] == [3, 0]
    assert (two[0].step_counter, two[1].learning_rate) == (True, True)
    # small_cnn: 5 chief -> worker, 17 worker -> ps, 11 ps -> worker (1 PS); 20, 11 and 5 ps -> ps (2 PS)
    assert tf_ps.rpcs_per_worker_step(one) == 5 + 17 + 11
    assert tf_ps.rpcs_per_worker_step(two) == 5 + 20 + 11 + 5
    mob = tf_ps_plans("mobilenet_v2", 2)
    assert sum(len(p.pulls()) for p in mob) == 158 + 104 + 1  # gradients, batch-norm statistics, the counter
    assert sum(p.lr_reads() for p in mob) == 79 and sum(len(p.reads()) for p in mob) == 262 + 38




