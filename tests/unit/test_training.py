"""commbench train (real distributed TensorFlow) and commbench predict (its arithmetic by hand)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commbench.core.errors import UsageError
from commbench.emulators import tf_ps
from commbench.profiles import store
from commbench.training import calibration as pc
from commbench.training import evidence as pe
from commbench.training import model as pm
from commbench.training import predict as pr


# -- predict: hand-computed cases -------------------------------------------------------------------
def test_fit_alpha_beta():
    link = pm.fit([(8, 10.0), (65536, 10 + 65536 / 1000), (1 << 20, 10 + (1 << 20) / 1000), (1024, 11.0)])
    assert link.alpha_us == 10.0 and link.beta_mb_s == pytest.approx(1000.0)
    assert link.us(1e6) == pytest.approx(1010.0)
    with pytest.raises(UsageError, match="at least two sizes"):
        pm.fit([(8, 1.0)])
    with pytest.raises(UsageError, match="does not grow"):
        pm.fit([(8, 5.0), (1 << 20, 4.0)])


def test_predict_ps_by_hand():
    link = pm.LinkModel(100.0, 1000.0)
    sizes = [1_000_000, 2_000_000, 3_000_000]  # round-robin on 2 shards: [4 MB, 2 MB]
    p = pm.predict_ps(sizes, workers=2, ps=2, batch=32, compute_ms=50.0, link=link)
    # as --rpc tf sends: a worker reads each shard's variables and its 21 B control token, and the step
    # counter (23 B) from shard 1 (3 variables, round-robin); the PS reads the gradients and the counter
    # busiest link: max(2 workers x shard 0's 4 MB + 21 B, a worker's 6 MB + 65 B) = 8,000,042 B read
    # and max(2 x 4 MB, 6 MB + 23 B) = 8 MB of gradients, at 100 us + n / 1000 B/us
    assert p.beta_bytes == 16_000_042
    assert p.terms == {"read_ms": pytest.approx(8.100042), "gradients_ms": pytest.approx(8.1)}
    assert p.step_ms == pytest.approx(66.200042) and p.images_s == pytest.approx(64 / 66.200042e-3)
    assert p.one_worker_images_s == pytest.approx(640.0)
    # in turn (the fast end): the round ends with the last worker's gradients alone, 6 MB + 23 B; the
    # middle (TURN 0.5) halfway: 7 MB + 12 B (bytes rounded)
    turn = pm.predict_ps(sizes, workers=2, ps=2, batch=32, compute_ms=50.0, link=link, turn=1.0)
    assert turn.terms == {"read_ms": pytest.approx(8.100042), "gradients_ms": pytest.approx(6.100023)}
    half = pm.predict_ps(sizes, workers=2, ps=2, batch=32, compute_ms=50.0, link=link, turn=pm.TURN)
    assert pm.TURN == 0.5 and half.terms["gradients_ms"] == pytest.approx(7.100012)
    one_turn, one = pm.predict_ps(sizes, 1, 2, 32, 50.0, link, turn=1.0), pm.predict_ps(sizes, 1, 2, 32, 50.0, link)
    assert (one_turn.step_ms, one_turn.terms) == (one.step_ms, one.terms)  # one worker: nothing to take turns
    # the middle from measured lags (turn None), one PS: gradients ready 2.05 ms apart, a worker's alone
    # 6.100023 ms at this link: the last ends 2 x 6.100023 - 2.05 after its own were ready, 0.336 of the
    # way from both at once to one alone
    assert pm.turn_of([[2.05], [2.05]], 6.100023, 2) == pytest.approx(2.05 / 6.100023)
    # the reads (6.1 ms a worker's alone) end half that apart, the first to read the first to compute:
    # 3.05 ms more lag, 5.1 of 6.1: gradients of 12,000,046 B at once, 6,000,023 B alone
    lagged = pm.predict_ps(sizes, 2, 1, 32, 50.0, link, turn=None, lags=[[2.05], [2.05]])
    assert lagged.gradients_turn == pytest.approx((2.05 + 6.100065 / 2) / 6.100023, abs=1e-5)
    assert lagged.terms["gradients_ms"] == pytest.approx(12.100046 - 6.000023 * lagged.gradients_turn, abs=1e-4)
    assert pm.predict_ps(sizes, 2, 1, 32, 50.0, link, turn=None, lags=[[13.0]]).gradients_turn == 1.0  # apart
    assert pm.predict_ps(sizes, 2, 1, 32, 50.0, link, turn=None).gradients_turn == pm.TURN  # no lags: TURN
    # W workers beat one where (W-1) compute exceeds the communication: 49.8 ms of room for 16 MB
    assert pm.min_bandwidth(lambda b: pm.predict_ps(sizes, 2, 2, 32, 50.0, pm.LinkModel(100.0, b))) == \
        pytest.approx(16_000_042 / (50_000 - 200), rel=1e-6)
    shared = pm.predict_ps(sizes, 2, 2, 32, 50.0, link, shared_host=True)  # 2 x a worker's bytes, one path
    assert shared.step_ms == pytest.approx(50 + (100 + 2 * 6_000_065 / 1000) / 1e3 + (100 + 2 * 6_000_023 / 1000) / 1e3)
    greedy = pm.predict_ps(sizes, 2, 2, 32, 50.0, link, policy="greedy")  # shards [3 MB + 1 MB, 2 MB]
    assert greedy.beta_bytes == pytest.approx(p.beta_bytes, abs=60)
    assert pm.min_bandwidth(lambda b: pm.predict_ps(sizes, 1, 1, 32, 50.0, pm.LinkModel(100.0, b))) is None
    assert pm.min_bandwidth(lambda b: pm.predict_ps(sizes, 2, 2, 32, 0.1, pm.LinkModel(100.0, b))) is None


@given(st.integers(2, 6), st.floats(0.01, 100.0), st.lists(st.lists(st.floats(0.0, 300.0), min_size=5, max_size=5),
                                                          min_size=1, max_size=30))
def test_the_gradients_turn_is_what_a_link_taking_them_in_order_makes_of_the_lags(workers, one_ms, raw):
    """turn_of: gradients ready at once (lags 0) cross all at once (0); ready a worker's transfer or more
    apart, one at a time (1); in between, the round's end as a queue at the PS's link makes it, never
    nearer in turn for lags made shorter; rounds of another W are left out (all of them: TURN)."""
    lags = [sorted(r[:workers - 1], reverse=True) for r in raw]
    assert pm.turn_of([[0.0] * (workers - 1)] * 3, one_ms, workers) == pytest.approx(0.0)
    apart = [[(workers - 1 - k) * one_ms * 1.01 for k in range(workers - 1)]]
    assert pm.turn_of(apart, one_ms, workers) == pytest.approx(1.0)
    t = pm.turn_of(lags, one_ms, workers)
    assert 0.0 <= t <= 1.0
    # by hand: the mean of the rounds' ends, W x one_ms at turn 0 and one_ms at turn 1
    ends = [max([one_ms] + [(workers - k) * one_ms - lag for k, lag in enumerate(r)]) for r in lags]
    assert t == pytest.approx((workers * one_ms - float(np.mean(ends))) / ((workers - 1) * one_ms), abs=1e-9)
    assert pm.turn_of([[lag / 2 for lag in r] for r in lags], one_ms, workers) <= t + 1e-9
    assert pm.turn_of([[1.0] * workers], one_ms, workers) == pm.TURN  # a round of W + 1 workers


def test_tf_runtime_is_calibrated_once_per_closure_and_rpc_or_per_collective():
    link = pm.LinkModel(100.0, 1000.0)
    small = tuple(tf_ps.Variable(n) for n in (1000, 2000))
    shape = pm.Shape("ps", 2, 1, 1, small)
    # a worker-step of --rpc tf on 1 shard: 3 Enqueue + 2 chief calls, 2 shard calls, 2 variables + token +
    # step counter read, 2 gradients + counter pulled
    assert shape.units() == 2 * (3 + 2 + 2 + 4 + 3)
    assert pm.Shape("ps", 4, 2, 1, small * 3).units() == 4 * tf_ps.rpcs_per_worker_step(tf_ps.plan(list(small * 3), 2))
    # mirrored: 2 collectives a worker-step however many tensors (TF all-reduces the gradients as one pack)
    assert pm.Shape("mirrored", 3, 0, 1, small + (tf_ps.Variable(8, trainable=False),)).units() == 3 * 2
    assert pm.Shape("mirrored", 3, 0, 1, small * 150).units() == 3 * 2
    exact = pm.Link(link, link, link)

    def run(shape: pm.Shape, per_unit: float, wobble: float = 0.0, per_closure: float = 0.0) -> pc.Calibrated:
        cost = per_unit * shape.units() + per_closure * shape.workers
        step = pm.with_runtime(shape.at(0.5, link, pm.TURN), cost).step_ms
        return pc.Calibrated(shape, exact, pm.Span.of(step, step - wobble, step + wobble), pm.Span.of(0.5))

    # three repeats of one shape: 0.4, 0.5, 0.6 ms per RPC (one shape cannot tell closures from RPCs: the
    # RPCs' term alone): the fit is their least-squares middle; its ends reach each repeat's own value,
    # and each run's interval (1 ms over 28 RPCs) beyond
    rt = pc.fit_runtime([run(shape, 0.4, 1.0), run(shape, 0.5, 1.0), run(shape, 0.6, 1.0)])
    assert rt.mid == pytest.approx((0.0, 0.5))
    at = rt.at(shape)
    assert (at.mid, at.lo, at.hi) == pytest.approx((0.5 * 28, 0.4 * 28, 0.6 * 28))
    tight = pc.fit_runtime([run(shape, 0.5, 1.0)] * 3).at(shape)
    half = shape.at(0.5, link, pm.TURN).step_ms  # the middle's schedule of the ps gradients; the ends':
    in_turn, together = half - shape.at(0.5, link, 1.0).step_ms, shape.at(0.5, link, 0.0).step_ms - half
    assert in_turn > 0 and together > 0
    assert tight.lo == pytest.approx(14 - 1 - together) and tight.hi == pytest.approx(14 + 1 + in_turn)
    # the slowest worker computed 0.3 ms longer: at the low end the step waited for it, not for TF's runtime
    waited = pm.with_wait(shape.at(0.5, link, pm.TURN), 0.8)
    assert waited.terms["slowest_worker_ms"] == pytest.approx(0.3)
    assert waited.step_ms == pytest.approx(shape.at(0.5, link, pm.TURN).step_ms + 0.3)
    step = pm.with_runtime(shape.at(0.5, link, pm.TURN), 14).step_ms
    slowest = pc.fit_runtime([pc.Calibrated(shape, exact, pm.Span.of(step), pm.Span.of(0.5), pm.Span.of(0.8))])
    assert slowest.at(shape).mid == pytest.approx(14) and slowest.at(shape).lo == pytest.approx(14 - 0.3 - together)
    # a second shape with 4x the workers (the same RPCs per closure): still one term, per RPC
    big = pm.Shape("ps", 8, 1, 1, small)
    assert pc.fit_runtime([run(shape, 0.5), run(big, 0.5)]).mid == pytest.approx((0.0, 0.5))
    # two models (other RPCs per closure): a closure's cost and an RPC's apart, and a third model predicted
    # from them; each repeat's fit (the i-th run of each shape) widens the ends
    many = pm.Shape("ps", 2, 1, 1, small * 40)
    apart = pc.fit_runtime([run(shape, 0.1, per_closure=3.0), run(many, 0.1, per_closure=3.0)])
    third = pm.Shape("ps", 3, 1, 1, small * 10)
    assert apart.mid == pytest.approx((3.0, 0.1)) and apart.at(third).mid == pytest.approx(9 + 0.1 * third.units())
    both = pc.fit_runtime([run(shape, 0.1, per_closure=3.0), run(many, 0.1, per_closure=3.0),
                           run(shape, 0.1, per_closure=3.0), run(many, 0.2, per_closure=3.0)])
    assert both.at(third).lo == pytest.approx(apart.at(third).mid)  # the first repeats' own fit
    assert both.at(third).hi > both.at(third).mid > both.at(third).lo
    # a closure term the steps make negative: not fitted (no negative cost), the RPCs' term alone
    neg = pc.fit_runtime([run(shape, 0.1, per_closure=-3.0), run(many, 0.1, per_closure=-3.0)])
    assert neg.mid[0] == 0.0 and neg.mid[1] > 0
    # mirrored: one term, per collective
    ring = pm.Shape("mirrored", 2, 0, 1, small)
    assert pc.fit_runtime([run(ring, 1.0)]).at(ring).mid == pytest.approx(4.0)


@given(sigmas=st.lists(st.floats(0.1, 20.0), min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=25, deadline=None)
def test_the_interval_holds_what_it_claims_where_the_inputs_errors_are_what_their_intervals_say(sigmas, seed):
    """A step that is the sum of inputs with independent normal errors, each known by its 95 % interval
    (1.96 sigma): the interval built from one-at-a-time moves holds COVERAGE of the outcomes (within
    sampling error), where moving every input to its end at once (the corners) holds more than it says."""
    rng = np.random.default_rng(seed)
    mid = 100.0
    hi = pm.interval_end(mid, [mid + 1.96 * s for s in sigmas], slow=True)
    lo = pm.interval_end(mid, [mid - 1.96 * s for s in sigmas], slow=False)
    assert lo < mid < hi and hi - mid == pytest.approx(mid - lo)
    outcomes = mid + rng.normal(0.0, sigmas, size=(20_000, len(sigmas))).sum(axis=1)
    held = np.mean((lo <= outcomes) & (outcomes <= hi))
    assert abs(held - pm.COVERAGE) < 0.015, held
    corners = np.mean(np.abs(outcomes - mid) <= 1.96 * sum(sigmas))
    assert corners >= held
    if len(sigmas) > 1 and max(sigmas) < 0.5 * sum(sigmas):
        assert corners > 0.98  # claims 95 % of each input and holds nearly all: wider than needed




@pytest.mark.parametrize("hidden", [0.0, 3.0, -2.0])
def test_the_runtime_under_the_wire_is_a_curve_through_the_calibration_links(hidden):
    """Calibration runs over an unshaped link (0.2 ms of wire) and three slower ones (1.5, 5 and 26 ms)
    whose steps are compute + wire + 10 ms of runtime - ``hidden`` once the wire outlasts 4 ms (none below 2:
    TF's runtime hides under long transfers only; negative: a slow link's per-frame cost): the runtime is fitted
    to the unshaped link's runs, every link gives its point back, and a link between two points of one side
    is predicted exactly; the unshaped link alone fits no curve."""
    shape = pm.Shape("ps", 2, 1, 64, tuple(tf_ps.variables_of(store.load("small_cnn"))))
    links = [pm.fit_span([{"size": s, "p50_us": 50 + s / b} for s in (8, 65536, 1 << 20)], f"{b} MB/s")
             for b in (10000.0, 700.0, 200.0, 40.0, 1500.0, 100.0)]

    def truth(wire: float) -> float:
        return float(np.interp(wire, [2.0, 4.0], [0.0, hidden]))

    def wire_of(link: pm.Link) -> float:
        return shape.at(20.0, link.mid, None).comm_ms

    def run(link: pm.Link) -> pc.Calibrated:
        return pc.Calibrated(shape, link, pm.Span.of(20.0 + wire_of(link) + 10.0 - truth(wire_of(link))),
                             pm.Span.of(20.0))

    wires = [wire_of(link) for link in links]
    assert wires[0] < wires[4] < wires[1] < 2 < 4 < wires[2] < wires[5] < wires[3]
    cal = pc.fit_runtime([run(link) for link in links[:4] for _ in range(2)])
    assert cal.at(shape).mid == pytest.approx(10.0)
    assert np.allclose(cal.hidden[0], [(w, truth(w)) for w in wires[:4]], rtol=0, atol=1e-9), cal.hidden[0]
    for link in links[4:]:  # between the two short links (nothing hides) and between the two long ones (all)
        cost, curve = cal.pairs(shape, wire_of(link))[0]
        step = pm.with_runtime(shape.at(20.0, link.mid, None), cost, curve).step_ms
        assert step == pytest.approx(20.0 + wire_of(link) + 10.0 - truth(wire_of(link)))
    alone = pc.fit_runtime([run(links[0]), run(links[0])])
    assert alone.hidden == ((),) * len(alone.hidden) and alone.at(shape).mid == pytest.approx(10.0)
    assert pm.hidden_at((), 5.0) == 0.0 and pm.hidden_at(((1.0, 2.0), (3.0, 4.0)), 9.0) == 4.0


@given(st.lists(st.floats(0.8, 1.5), min_size=1, max_size=8))
def test_the_load_interval_holds_every_calibration_run_and_their_spread(ratios):
    """load_span: the median, with ends never inside the farthest run nor closer than Z_INPUT standard
    deviations (one run: no spread)."""
    s = pc.load_span(ratios)
    assert s.mid == pytest.approx(float(np.median(ratios)))
    assert s.lo <= min(ratios) and s.hi >= max(ratios)
    if len(ratios) > 1:
        sd = float(np.std(ratios, ddof=1))
        assert s.lo <= s.mid - pm.Z_INPUT * sd + 1e-12 and s.hi >= s.mid + pm.Z_INPUT * sd - 1e-12


@given(st.floats(10.0, 80.0), st.floats(0.5, 2.0), st.floats(0.02, 0.6))
@settings(max_examples=25, deadline=None)
def test_tf_runtime_is_taken_at_the_pace_of_the_compute_time_predicted_with(pace, slower, share):
    """TF's runtime is CPU work at the machine's pace: calibration runs of the predicted model and batch
    whose cost beyond compute and the wire is ``share`` of their own compute time (one made while the
    machine ran ``slower``), predicted with compute time ``pace``: the runtime is share x pace; unscaled,
    the mean of the two runs' costs (the CLI's pace and unscaled batches: the test above)."""
    link = pm.fit_span([{"size": s, "p50_us": 100 + s / 100} for s in (8, 65536, 1 << 20)], "by hand")
    shape = pm.Shape("mirrored", 2, 0, 64, tuple(tf_ps.variables_of(store.load("small_cnn"))))
    wire = shape.at(30.0, link.mid).comm_ms
    runs = [pc.Calibrated(shape, link, pm.Span.of(c + wire + share * c), pm.Span.of(c)) for c in (30.0, 30.0 * slower)]
    fitted = pc.fit_runtime(runs, pace).at(shape)
    assert fitted.mid == pytest.approx(share * pace, rel=1e-6) and fitted.lo <= fitted.mid <= fitted.hi
    assert pc.fit_runtime(runs).at(shape).mid == pytest.approx(share * 30.0 * (1 + slower) / 2, rel=1e-6)


def test_a_compute_run_is_taken_to_drift_as_far_as_it_moved_while_measured():
    """The compute time for a later run: its interval widened by how far the pace moved between the
    compute run's two measurements (41 / 38 here: 40 divided and multiplied by it), never narrower than
    the median's interval, and never to a time at or below 0 however far the pace moved."""
    row = {"compute_ms": 40.0, "compute_ci_lo_ms": 39.5, "compute_ci_hi_ms": 40.5, "compute_before_ms": 38.0,
           "compute_after_ms": 41.0}
    got = pe.drifting(row)
    assert (got.mid, got.lo, got.hi) == pytest.approx((40.0, 40 * 38 / 41, 40 * 41 / 38))
    wild = pe.drifting({**row, "compute_ms": 171.4, "compute_before_ms": 20.0, "compute_after_ms": 350.0})
    assert 0 < wild.lo == pytest.approx(171.4 / 17.5) and wild.hi == pytest.approx(171.4 * 17.5)
    steady = {**row, "compute_before_ms": 40.1, "compute_after_ms": 40.0}
    assert pe.drifting(steady) == pm.Span(40.0, 39.5, 40.5)
    old = {k: v for k, v in row.items() if not k.startswith("compute_") or k.endswith(("ci_lo_ms", "ci_hi_ms"))}
    assert pe.drifting({**old, "compute_ms": 40.0}) == pm.Span(40.0, 39.5, 40.5)


@given(st.lists(st.lists(st.lists(st.floats(1.0, 100.0), min_size=3, max_size=3), min_size=1, max_size=4),
                min_size=1, max_size=4))
def test_the_compute_between_training_steps_is_the_bursts_steps_after_the_first(bursts):
    """train's compute bursts between training steps: compute_during_p50_ms is the median of every
    worker's burst steps but the first (the run's pace), compute_cold_p50_ms of the first steps (a compute
    step right after a training step's communication); before and after stay as they were."""
    from commbench.training.train import compute_row

    before, after = [[40.0] * 12 for _ in bursts], [[42.0] * 12 for _ in bursts]
    row = compute_row(before, after, bursts)
    assert row["compute_during_p50_ms"] == pytest.approx(float(np.median([t for w in bursts for b in w
                                                                           for t in b[1:]])))
    assert row["compute_cold_p50_ms"] == pytest.approx(float(np.median([b[0] for w in bursts for b in w])))
    assert (row["compute_before_ms"], row["compute_after_ms"]) == (40.0, 42.0)
    assert "compute_during_p50_ms" not in compute_row(before, after)  # --compute-only: no bursts
    assert "compute_cold_p50_ms" not in compute_row(before, after, [[] for _ in bursts])  # under 5 steps: none


@given(st.floats(20.0, 200.0), st.floats(0.0, 5.0), st.floats(0.0, 5.0), st.floats(0.5, 0.95),
       st.floats(0.0, 5.0), st.floats(0.0, 5.0))
def test_a_runs_measured_communication_is_as_fine_as_its_two_medians_together(step, s_lo, s_hi, share, c_lo, c_hi):
    """comm_span: a run's mean step less its own compute, each end as far out as the two medians'
    intervals added in quadrature (the step's upper side with the compute's lower, and so on): a run
    whose step and compute are both known to +-1 ms knows its communication to +-1.41 ms, not +-1."""
    own = share * step
    row = {"strategy": "mirrored", "model": "small_cnn", "workers": 2, "ps": 0, "batch": 32,
           "images_s": 2 * 32 / step * 1e3, "step_p50_ms": step, "step_ci_lo_ms": step - s_lo,
           "step_ci_hi_ms": step + s_hi, "compute_ms": own, "compute_during_p50_ms": own,
           "compute_during_ci_lo_ms": own - c_lo, "compute_during_ci_hi_ms": own + c_hi}
    c = pe.comm_span(row)
    assert c.mid == pytest.approx(step - own)
    assert c.hi - c.mid == pytest.approx(math.hypot(s_hi, c_lo), abs=1e-9)
    assert c.mid - c.lo == pytest.approx(math.hypot(s_lo, c_hi), abs=1e-9)
    assert c.hi - c.lo >= max(s_lo + s_hi, c_lo + c_hi) - 1e-9  # never finer than either alone
    # a median of under 20 samples has no interval: how finely the run measured it is unknown, not exact
    for k in ("step_ci_lo_ms", "compute_during_ci_hi_ms"):
        assert pe.comm_span({**row, k: None}) is None


def test_fit_span_gives_a_fast_and_a_slow_link():
    rows = [{"size": s, "p50_us": 10 + s / 1000, "p50_ci_lo_us": 9 + s / 1100, "p50_ci_hi_us": 12 + s / 900}
            for s in (8, 65536, 1 << 20)]
    link = pm.fit_span(rows)
    assert link.mid.alpha_us == pytest.approx(10.008) and link.mid.beta_mb_s == pytest.approx(1000)
    assert link.fast.alpha_us < link.mid.alpha_us < link.slow.alpha_us
    assert link.slow.beta_mb_s == pytest.approx(900) and link.fast.beta_mb_s == pytest.approx(1100)


def _results(path, bench, rows, **options):
    meta = {"type": "meta", "bench": bench, "options": options, "hosts": ["a", "b"]}
    path.write_text("\n".join(json.dumps(x) for x in [meta, *({"type": "row", "bench": bench, **r} for r in rows)])
                    + "\n")
    return str(path)




def test_runtime_adds_its_cost_to_the_step():
    link = pm.LinkModel(100.0, 1000.0)
    p = pm.predict_ps([1_000_000, 2_000_000, 3_000_000], 2, 2, 30, 60.0, link)
    q = pm.with_runtime(p, 5.0)
    assert q.step_ms == pytest.approx(p.step_ms + 5) and q.terms["tf_runtime_ms"] == 5.0
    assert q.comm_ms == pytest.approx(p.comm_ms + 5) and q.images_s == pytest.approx(60 / q.step_ms * 1e3)
    assert q.margin_ms == pytest.approx(2 * 60.0 - q.step_ms)


def test_measured_communication_replaces_the_model(tmp_path):
    link = pm.LinkModel(100.0, 1000.0)
    p = pm.with_comm(pm.predict_ps([1_000_000, 2_000_000], 2, 1, 32, 50.0, link), 30.0, "ps-throughput")
    assert p.step_ms == 80.0 and p.comm_ms == 30.0 and p.images_s == pytest.approx(64 / 80e-3)
    meta = {"type": "meta", "bench": "allreduce", "options": {"ranks": 4}}
    rows = [{"type": "row", "bench": "allreduce", "transport": "tcp", "algorithm": "ring", "size": s,
             "time_us": t} for s, t in ((1 << 20, 1000.0), (4 << 20, 3000.0))]
    f = tmp_path / "ar.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in [meta, *rows]) + "\n")
    ms, source = pe.measured_comm(str(f), "mirrored", 4, 0, "small_cnn", 3 << 20)
    assert ms == pytest.approx(3.0 * 3 / 4) and "at 4194304 B" in source  # nearest size, scaled to the bytes
    with pytest.raises(UsageError, match="allreduce rows over 2 ranks"):
        pe.measured_comm(str(f), "mirrored", 2, 0, "small_cnn", 1 << 20)
    with pytest.raises(UsageError, match="ps-throughput rows with --workers 2 --ps 1"):
        pe.measured_comm(str(f), "ps", 2, 1, "small_cnn", 1 << 20)
    # --rpc tf rows: the chief's round time; packed rows: a pull and a push
    row = {"transport": "tcp", "payload": "small_cnn[10]=0.3MB", "workers": 2, "ps": 1, "steps_s": 40.0,
           "pull_p50_ms": 2.0, "push_p50_ms": 3.0}
    ps = _results(tmp_path / "tf.jsonl", "ps-throughput", [{**row, "rpc": "tf"}])
    assert pe.measured_comm(ps, "ps", 2, 1, "small_cnn", 1 << 20) == (25.0, "ps-throughput tcp --rpc tf "
                                                                      "small_cnn[10]=0.3MB")
    ps = _results(tmp_path / "packed.jsonl", "ps-throughput", [{**row, "rpc": "packed"}])
    assert pe.measured_comm(ps, "ps", 2, 1, "small_cnn", 1 << 20)[0] == 5.0


def test_predict_ring_by_hand():
    link = pm.LinkModel(100.0, 1000.0)
    p = pm.predict_ring(6_000_000, workers=4, batch=32, compute_ms=50.0, link=link)
    # 2 (W-1) alpha = 600 us; 2 (W-1)/W x 6 MB = 9 MB at 1000 B/us = 9000 us
    assert p.comm_ms == pytest.approx(9.6) and p.step_ms == pytest.approx(59.6)
    assert p.images_s == pytest.approx(128 / 59.6e-3)
    assert pm.min_bandwidth(lambda b: pm.predict_ring(6_000_000, 4, 32, 50.0, pm.LinkModel(100.0, b))) == \
        pytest.approx(9e6 / (150_000 - 600), rel=1e-6)
    assert pm.predict_ring(6_000_000, 2, 32, 50.0, link, shared_host=True).comm_ms == pytest.approx(
        (2 * 100 + 2 * 6e6 / 1000) / 1e3)


def test_dominant_names_the_busiest_shard_and_tensors():
    lines = pm.dominant([1_000_000, 2_000_000, 3_000_000], ["a", "b", "c"], 2, "round-robin")
    assert lines[0].startswith("busiest shard: 0 of 2 holds 4.00 MB (67 %")
    assert lines[1] == "largest tensors: c 3.00 MB (50 %), b 2.00 MB (33 %), a 1.00 MB (17 %)"


# -- bad input ------------------------------------------------------------------------------------


# -- real training ----------------------------------------------------------------------------------


# -- TensorFlow's own gRPC as a transport -----------------------------------------------------------------






# -- the README's prediction recipe, end to end ------------------------------------------------------


@pytest.mark.parametrize("lo, hi, mid, says", [
    (None, None, None, "no bandwidth makes 3 workers faster than one"),
    (100.0, None, None, "undecided, 100.0 MB/s at the fast end (0.80 Gbit/s), none at the slow end"),
    (100.0, 200.0, 150.0, "150.0 MB/s, between 100.0 and 200.0 (0.80-1.60 Gbit/s)"),
    (100.0, 100.0, 100.0, "3 workers to beat one: 100.0 MB/s (0.80 Gbit/s)")])
def test_the_minimum_bandwidth_is_said_as_the_ends_decide(lo, hi, mid, says):
    """W workers beat one above a bandwidth the model finds at each end of the inputs: none, one end
    only (undecided), a range, or one number where the ends agree."""
    assert says in pr.min_bandwidth_line(3, lo, hi, mid)


def test_an_uncalibrated_prediction_says_so_and_hedges_its_verdict(tmp_path):
    """Without --overhead, TF's runtime is left out: predict says so and the verdict says it holds only
    were the runtime free; a compute time alone that the train runs' own compute does not match is named,
    with the runs' loads."""
    import contextlib
    import io
    from pathlib import Path

    from commbench.cli import main

    fix = Path(__file__).parent.parent / "fixtures"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["predict", "--p2p", str(fix / "latency_grpc.jsonl"), "--train", str(fix / "train.jsonl")]) == 0
    text = out.getvalue()
    assert "TF's runtime is not calibrated (no --overhead)" in text
    assert "data parallelism pays off at this bandwidth, were TF's runtime free (not calibrated)" in text

    def at(name: str, load: float, scale: float = 1.0) -> str:
        """The train fixture at another load, its compute times scaled: a compute-only file of sorts."""
        meta, *rows = map(json.loads, (fix / "train.jsonl").read_text().splitlines())
        meta.update(load=[load, load, load], cpus=2)
        rows = [{k: v * scale if k.startswith("compute") and k.endswith("_ms") and v else v for k, v in r.items()}
                for r in rows]
        (tmp_path / name).write_text("\n".join(map(json.dumps, [meta, *rows])) + "\n")
        return str(tmp_path / name)

    def predicted(compute: str, train: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["predict", "--p2p", str(fix / "latency_grpc.jsonl"), "--compute", compute,
                         "--train", train]) == 0
        return out.getvalue()

    busy = predicted(at("alone.jsonl", 0.2, scale=0.5), at("busy.jsonl", 7.9))  # alone: half the compute
    drift = [ln for ln in busy.splitlines() if "so the prediction is off by about as much" in ln]
    assert len(drift) == 1 and re.search(r"differ 2\.00x \(1-minute load 0\.2 and 7\.9 as they started, 2 CPUs\)",
                                         drift[0]), busy
    assert "the machine was busy: measure both on a quiet one" in drift[0]
    quiet = predicted(at("alone2.jsonl", 0.2, scale=0.5), at("quiet.jsonl", 3.9))  # 2 CPUs, 4 processes: not busy
    assert "the training's own processes slowed its workers: calibrate that with --overhead-compute" in quiet
    slow_alone = predicted(at("alone3.jsonl", 0.2, scale=2.0), at("quiet2.jsonl", 3.9))  # alone: twice the compute
    assert "differ 0.50x" in slow_alone and "the compute-only runs computed slower than the workers" in slow_alone
    quiet = predicted(at("a.jsonl", 0.2), at("b.jsonl", 2.7))  # the same compute: the run before's load is no news
    assert "off by about as much" not in quiet, quiet
    assert pe.compute_note(10.0, [10.5], "c.jsonl", "t.jsonl") is None  # within the drift a quiet machine shows
    assert "differ 0.80x" in pe.compute_note(10.0, [8.0], str(fix / "train.jsonl"), str(fix / "train.jsonl"))


@pytest.mark.parametrize("busy", [0.1, 0.4, 1.3])
def test_predict_warns_where_other_work_shared_the_runs_machine(busy, tmp_path):
    """A train run's metadata says what else kept the CPUs busy over the run (its own processes left
    out); a quarter of them or more: predict warns, naming the file and the share."""
    import contextlib
    import io
    from pathlib import Path

    from commbench.cli import main

    fix = Path(__file__).parent.parent / "fixtures"
    meta, *rows = map(json.loads, (fix / "train.jsonl").read_text().splitlines())
    meta["cpu"] = {"busy": busy, "cpus": 2, "seconds": 40.0}
    train = tmp_path / "t.jsonl"
    train.write_text("\n".join(map(json.dumps, [meta, *rows])) + "\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["predict", "--p2p", str(fix / "latency_grpc.jsonl"), "--train", str(train)]) == 0
    warned = [ln for ln in out.getvalue().splitlines() if "other work used" in ln]
    assert len(warned) == (busy >= 0.5)
    assert not warned or f"{busy:.1f} of 2 CPUs during --train {train}" in warned[0]


def test_a_compute_time_whose_pace_moved_far_is_bounded_and_said(tmp_path):
    """A compute-only run whose two measurements differ 17.5x: the compute time's interval stays above
    0 (predict's Low-High finite), and a `# warning:` line (the lines launchers/predict.sh shows beside
    the row) says the interval is wide; a steady one gives no such line."""
    import contextlib
    import io
    from pathlib import Path

    from commbench.cli import main

    fix = Path(__file__).parent.parent / "fixtures"
    meta, *rows = map(json.loads, (fix / "train.jsonl").read_text().splitlines())

    def predicted(before: float, after: float) -> list[str]:
        compute = tmp_path / f"c{before}.jsonl"
        moved = [{**r, "compute_before_ms": r["compute_ms"] * before, "compute_after_ms": r["compute_ms"] * after}
                 for r in rows]
        compute.write_text("\n".join(map(json.dumps, [meta, *moved])) + "\n")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["predict", "--p2p", str(fix / "latency_grpc.jsonl"), "--compute", str(compute),
                         "--train", str(fix / "train.jsonl"), "--json"]) == 0
        return json.loads(out.getvalue()), compute

    doc, _ = predicted(0.2, 3.5)  # before and after: shares of the row's compute time
    assert 0 < doc["images_lo"] <= doc["images_s"] <= doc["images_hi"] < 1e6, doc
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["predict", "--p2p", str(fix / "latency_grpc.jsonl"), "--compute", str(tmp_path / "c0.2.jsonl"),
              "--train", str(fix / "train.jsonl")])
    warned = [ln for ln in out.getvalue().splitlines() if ln.startswith("# warning: the compute time spans")]
    assert len(warned) == 1 and "measure again on a quieter machine" in warned[0], out.getvalue()
    steady, compute = predicted(1.0, 1.01)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["predict", "--p2p", str(fix / "latency_grpc.jsonl"), "--compute", str(compute),
              "--train", str(fix / "train.jsonl")])
    assert "the compute time spans" not in out.getvalue()
