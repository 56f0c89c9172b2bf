"""bft.curve: curves, model fitting, the profiling advisor (mirrors key C++ cases)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import bft
from bft import curve

SIZES = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], dtype=float)


def usl(n):
    return 1000.0 * n / (1.0 + 0.02 * (n - 1.0) + 4e-4 * n * (n - 1.0))


def amdahl(n):
    return 1.0 / (2e-5 + 1e-3 / n)


def test_throughput_curve_evaluates_vectorised_and_validates():
    c = curve.ThroughputCurve([1, 4], [10.0, 40.0])
    assert c.evaluate(2) == pytest.approx(20.0)
    np.testing.assert_allclose(c(np.array([0.0, 0.5, 4.0, 100.0])), [0.0, 5.0, 40.0, 40.0])
    table = c.table(4)
    assert isinstance(table, np.ndarray) and table.shape == (5,)
    with pytest.raises(ValueError, match="strictly increasing"):
        curve.ThroughputCurve([2, 1], [1.0, 2.0])
    ok, why = curve.ThroughputCurve.check([1], [float("nan")])
    assert not ok and "breakpoint 0" in why


@pytest.mark.parametrize("model,truth", [("amdahl", amdahl), ("usl", usl)])
def test_forced_model_recovers_noisy_curve(model, truth):
    rng = np.random.default_rng(3)
    x = truth(SIZES) * (1.0 + 0.03 * rng.standard_normal(SIZES.size))
    res = curve.fit(SIZES, x, model=model)
    assert res.ok, res.message
    assert curve.model_name(res.model) == model
    n = np.arange(1, 65, dtype=float)
    assert np.max(np.abs(res.predict(n) / truth(n) - 1.0)) < 0.05


def test_auto_choice_follows_turn_down_and_beats_amdahl():
    rng = np.random.default_rng(5)
    x = usl(SIZES) * (1.0 + 0.02 * rng.standard_normal(SIZES.size))
    n = np.arange(1, 65, dtype=float)
    auto = curve.fit(SIZES, x)
    plain = curve.fit(SIZES, x, model="amdahl")
    err_auto = np.max(np.abs(auto.predict(n) / usl(n) - 1))
    err_amdahl = np.max(np.abs(plain.predict(n) / usl(n) - 1))
    assert curve.model_name(auto.model) != "amdahl"
    assert err_auto < 0.05 < err_amdahl
    assert len(auto.candidates) == 4
    assert curve.fit(SIZES, x, selection="aicc").ok


def test_statuses_are_explicit():
    single = curve.fit([4], [100.0])
    assert single.status == curve.FitStatus.INSUFFICIENT_DATA and not single.ok
    assert "one distinct node count" in single.message
    with pytest.raises(bft.Error, match="insufficient_data"):
        single.predict(4)
    two = curve.fit([1, 4], [100.0, 350.0], model="optimus")
    assert two.status == curve.FitStatus.INSUFFICIENT_DATA
    ill = curve.fit([1.0, 1.0 + 1e-12], [100.0, 100.0])
    assert ill.status == curve.FitStatus.ILL_CONDITIONED
    opts = curve.FitOptions()
    opts.max_iterations = 1
    stuck = curve.fit(SIZES, usl(SIZES) * (1 + 0.05 * np.sin(SIZES)), model="usl", options=opts)
    assert stuck.status == curve.FitStatus.NOT_CONVERGED


@pytest.mark.parametrize(
    "nodes,rates,match",
    [
        ([], [], "no samples"),
        ([1, -2], [10.0, 10.0], "node count -2"),
        ([1, 2], [10.0, float("nan")], "samples_per_s nan"),
        ([1, 4, 4], [100.0, 300.0, 900.0], "4 nodes conflict"),
        ([1, 2], [10.0], "2 node counts but 1"),
    ],
)
def test_bad_inputs_raise_value_error(nodes, rates, match):
    with pytest.raises(ValueError, match=match):
        curve.fit(nodes, rates)


def test_unknown_model_name_is_a_value_error():
    with pytest.raises(ValueError, match="unknown curve model"):
        curve.fit([1, 2, 4], [1.0, 2.0, 3.0], model="linear")
    with pytest.raises(ValueError, match="selection"):
        curve.fit([1, 2, 4], [1.0, 2.0, 3.0], selection="bic")


def test_extrapolation_is_conservative():
    res = curve.fit([1, 2, 4, 8], [100.0, 200.0, 400.0, 800.0])
    assert res.evaluate(16) == pytest.approx(1200.0, rel=1e-6)
    assert res.evaluate(64) == pytest.approx(res.evaluate(16))
    table = res.to_curve(32).table(32)
    assert table[4] == pytest.approx(400.0)


def test_real_curves_meet_the_accuracy_targets(shared_data):
    path = shared_data / "jobs-imagenet-throughput-1001.jsonl"
    if not path.exists():
        pytest.skip(f"real data not found: {path}")
    curves, seen = [], set()
    for line in path.read_text().splitlines():
        job = json.loads(line)
        if tuple(job["throughput"]) in seen:
            continue
        seen.add(tuple(job["throughput"]))
        curves.append({n: x for n, x in zip(job["nodes"], job["throughput"]) if n > 0})
    assert len(curves) == 7

    def errors(train, model="auto"):
        out = []
        for c in curves:
            res = curve.fit(list(train), [c[n] for n in train], model=model)
            assert res.ok
            out += [abs(res.predict(n) / x - 1) for n, x in c.items() if n not in train]
        return out

    e = errors((1, 8, 64))
    assert np.median(e) <= 0.05 and max(e) <= 0.20
    assert np.median(errors((1, 4, 16))) <= 0.08
    assert max(e) < max(errors((1, 8, 64), "amdahl"))


class SimJob:
    """A job reporting progress every period_s with noise; stalls stall_s after every Run start."""

    def __init__(self, truth, job_id="job", noise=0.03, stall_s=15.0, period_s=10.0, seed=1):
        self.truth, self.id, self.noise, self.stall_s, self.period_s = truth, job_id, noise, stall_s, period_s
        self.t, self.samples, self.scale = 0.0, 0.0, 1.0
        self.rng = np.random.default_rng(seed)

    def run(self, adv, nodes, duration_s):
        adv.report(self.id, self.t, nodes, self.samples)
        start = self.t
        while self.t < start + duration_s - 1e-9:
            t1 = self.t + self.period_s
            productive = max(0.0, t1 - max(self.t, start + self.stall_s))
            self.samples += self.truth(nodes) * self.scale * (1 + self.noise * self.rng.standard_normal()) * productive
            self.t = t1
            adv.report(self.id, self.t, nodes, self.samples)


def test_advisor_prior_then_convergence_to_true_curve():
    opts = curve.AdvisorOptions()
    opts.prior_samples_per_node_s = 50.0
    adv = curve.ProfilingAdvisor(opts)
    assert adv.throughput_estimate("job", 8).evaluate(8) == pytest.approx(400.0)
    job = SimJob(lambda n: 1.0 / (1e-4 + 1e-3 / n + 5e-5 * math.log2(n) / n))
    for n in (1, 2, 4, 8, 16, 32):
        job.run(adv, n, 600.0)
    est = adv.throughput_estimate("job", 64)
    n = np.arange(1, 33)
    truth = np.array([job.truth(k) for k in n])
    np.testing.assert_allclose(est(n.astype(float)), truth, rtol=0.03)
    prof = adv.profile("job")
    assert prof.fit.ok and len(prof.sizes) == 6
    assert all(abs(r.overhead_s - 15.0) < 3.0 for r in prof.rescales)
    obj = adv.objective_curve("job", 64)
    assert obj.evaluate(64) / est.evaluate(64) > obj.evaluate(8) / est.evaluate(8)


def test_advisor_drift_probes_and_save_load():
    adv = curve.ProfilingAdvisor()
    job = SimJob(lambda n: 100.0 * n)
    job.run(adv, 8, 3000.0)
    job.scale = 0.6
    job.run(adv, 8, 300.0)
    assert adv.profile("job").sizes[0].samples_per_s == pytest.approx(480.0, rel=0.03)
    probes = adv.probe_suggestions("job", 32, 3)
    assert len(probes) == 3 and all(p.nodes != 8 for p in probes)
    state = adv.save()
    back = curve.ProfilingAdvisor.load(state)
    assert back.save() == state
    np.testing.assert_array_equal(back.objective_curve("job", 16).values, adv.objective_curve("job", 16).values)
    with pytest.raises(ValueError, match="advisor state:1"):
        curve.ProfilingAdvisor.load("nonsense")


def test_advisor_bad_reports_raise_value_error():
    adv = curve.ProfilingAdvisor()
    adv.report("j", 10.0, 2, 100.0)
    with pytest.raises(ValueError, match="job 'j'"):
        adv.report("j", 5.0, 2, 200.0)
    with pytest.raises(ValueError, match="node count -1"):
        adv.report("j", 20.0, -1, 200.0)
    with pytest.raises(ValueError, match="unknown job"):
        adv.profile("nope")
    adv.forget("j")
    assert adv.jobs() == []


def test_advisor_measures_in_place_and_relaunch_costs_apart():
    # 100 samples/s per node, reports every 10 s; an in-place rescale stalls 1 s, a relaunch 15 s.
    adv = curve.ProfilingAdvisor()
    inplace, relaunch = curve.RescaleMethod.INPLACE, curve.RescaleMethod.RELAUNCH
    t = samples = 0.0
    for nodes, method, stall in ((4, None, 15.0), (8, inplace, 1.0), (4, inplace, 1.0), (8, relaunch, 15.0)):
        adv.report("job", t, nodes, samples, method)
        for k in range(30):
            samples += 100.0 * nodes * max(0.0, 10.0 - max(0.0, stall - 10.0 * k))
            t += 10.0
            adv.report("job", t, nodes, samples)
    prof = adv.profile("job")
    assert [curve.rescale_method_name(r.method) for r in prof.rescales] == ["relaunch", "inplace", "inplace",
                                                                             "relaunch"]
    assert [curve.rescale_method_name(c.method) for c in prof.costs] == ["relaunch", "inplace"]
    costs = prof.method_costs(inplace)
    assert (costs.scale_ups, costs.scale_downs) == (1, 1)
    # Allocator units: seconds at the old size's rate (1 s at 800/s = 2 s at 400/s).
    assert curve.measured_rescale_costs(prof, 9.0, 9.0, inplace) == pytest.approx((2.0, 0.5))
    assert curve.measured_rescale_costs(prof, 9.0, 9.0) == pytest.approx((30.0, 9.0))  # relaunch: no shrink yet
    back = curve.ProfilingAdvisor.load(adv.save())
    assert back.profile("job").method_costs(inplace).mean_scale_up_s == costs.mean_scale_up_s
    assert curve.rescale_method_from_string("inplace") == inplace
    with pytest.raises(ValueError, match="unknown rescale method 'warm'"):
        curve.rescale_method_from_string("warm")


def test_duplicate_tolerance_default_is_twenty_percent_of_the_mean():
    assert curve.FitOptions().duplicate_tolerance == 0.2
    # 100 and 115 at 4 nodes: 14% of their mean, merged; 100 and 130: 26%, conflicting.
    assert curve.fit([1, 2, 4, 4], [50.0, 90.0, 100.0, 115.0]).num_sizes == 3
    with pytest.raises(ValueError, match="4 nodes conflict"):
        curve.fit([1, 2, 4, 4], [50.0, 90.0, 100.0, 130.0])


@pytest.mark.parametrize("c", [1e-200, 1.0, 1e200])
def test_fits_are_scale_invariant(c):
    n = np.array([1, 2, 4, 8, 16, 32], dtype=float)
    x = np.array([100.0, 190.0, 340.0, 560.0, 800.0, 950.0])
    base = curve.fit(n, x)
    scaled = curve.fit(n, c * x)
    assert scaled.ok and scaled.model == base.model
    m = np.array([1.0, 3.0, 32.0, 64.0])
    np.testing.assert_allclose(scaled.predict(m) / c, base.predict(m), rtol=1e-9)


def test_curves_have_sparse_breakpoints_for_any_pool_size():
    res = curve.fit([1, 2, 4, 8], [100.0, 190.0, 340.0, 560.0])
    big = res.to_curve(1_000_000_000)
    assert len(big.nodes) < 70 and big.nodes[-1] == 1_000_000_000
    np.testing.assert_array_equal(big.values, res.evaluate(np.asarray(big.nodes, dtype=float)))
    adv = curve.ProfilingAdvisor()
    job = SimJob(lambda n: 1.0 / (1e-4 + 1e-3 / n))
    for n in (1, 3, 8):
        job.run(adv, n, 300.0)
    both = adv.curves("job", 4734)
    assert len(both.throughput.nodes) < 40 and {1, 3, 8, 16, 4734} <= set(both.throughput.nodes)
    np.testing.assert_array_equal(both.throughput.values, adv.throughput_estimate("job", 4734).values)
    np.testing.assert_array_equal(both.objective.values, adv.objective_curve("job", 4734).values)


def test_advisor_options_from_key_value_items_set_the_advisor_and_its_fit():
    options = curve.advisor_options(["warmup_s=30", "fit.extrapolation_limit=2", "fit.extrapolation_discount=0.5"])
    assert (options.warmup_s, options.fit.extrapolation_limit, options.fit.extrapolation_discount) == (30, 2, 0.5)
    default = curve.AdvisorOptions()
    assert curve.advisor_options([]).exploration_bonus == default.exploration_bonus
    assert "warmup_s" in curve.ADVISOR_KEYS and "fit.extrapolation_limit" in curve.ADVISOR_KEYS


@pytest.mark.parametrize("items, message", [
    (["warmup"], "--advisor 'warmup': expected KEY=VALUE with KEY one of "),
    (["no_such_key=1"], "--advisor 'no_such_key=1': expected KEY=VALUE"),
    (["exploration_bonus=x"], "--advisor exploration_bonus: 'x' is not a number"),
    (["fit.extrapolation_limit=0.5"], "--advisor fit options: extrapolation_limit 0.5 must be finite and >= 1"),
])
def test_a_bad_advisor_item_is_a_value_error_naming_the_flag_and_key(items, message):
    with pytest.raises(ValueError) as e:
        curve.advisor_options(items)
    assert str(e.value).startswith(message)
    with pytest.raises(ValueError, match="^--candidate "):
        curve.advisor_options(items, flag="--candidate")
