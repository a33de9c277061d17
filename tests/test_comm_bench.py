"""`bench comm`: the fit, a real measurement of every collective on tiny sizes over two emulated
hosts, and the namespace helper cleaning up after a failure."""

import subprocess
import sys

import pytest

from autoshard.core.collectives import KEYS, Collective, Tier
from autoshard.core.errors import InputError, MeasurementError
from cost_model.bench import netns
from cost_model.bench.comm_fit import call_point, fit_collective, fit_line, sent_bytes
from cost_model.bench.netns import EmulatedHosts, LinkShape, missing_privilege, project_namespaces

needs_root = pytest.mark.skipif(missing_privilege() is not None, reason=str(missing_privilege()))


def test_the_fit_recovers_a_line_and_counts_the_bytes_a_rank_sends():
    points = [(b, 0.2 + b / 1.5e6) for b in (1e4, 1e5, 1e6, 1e7)]  # 0.2 ms + 1.5 GB/s
    assert fit_line(points) == pytest.approx((0.2, 1.5), rel=1e-6)
    # a 10% slower large call moves the bandwidth, not the latency; a faster small one clips at 0
    noisy = [(1e4, 0.21), (1e5, 0.27), (1e6, 0.87), (1e7, 1.1 * (0.2 + 1e7 / 1.5e6))]
    latency, bandwidth = fit_line(noisy)
    assert latency == pytest.approx(0.2, abs=0.1) and bandwidth == pytest.approx(1.5, rel=0.15)
    assert fit_line([(1e4, 0.001), (1e6, 1.0), (4e6, 4.0)]) == (0.0, pytest.approx(1.0, rel=0.01))
    assert sent_bytes(Collective.ALL_TO_ALL, 4096, 2) == 2048  # half stays on the rank
    assert sent_bytes(Collective.ALL_REDUCE, 4096, 4) == 6144  # a ring: 2 x 3/4
    with pytest.raises(ValueError, match="two message sizes"):
        fit_line([(1e4, 1.0)])


def test_an_op_of_two_calls_is_fitted_per_call_so_the_model_prices_the_op():
    # the ids' KJTAllToAll (lengths, then ids) held 4096 bytes a rank and took 3 ms: 2 calls
    assert call_point(Collective.INPUT_DIST, 4096, 3.0, 2) == (1024, 1.5)
    assert call_point(Collective.REDUCE_SCATTER, 4096, 3.0, 2) == (2048, 3.0)
    ops = [[held, 2 * (0.5 + held / 2 / 2 / 1e6)] for held in (1e4, 1e5, 1e6, 1e7)]  # 0.5 ms a call, 1 GB/s
    fit = fit_collective(Collective.ALL_TO_ALL, Tier.INTRA, ops, 2, "loopback")
    assert (fit.latency_ms, fit.bandwidth_gbps) == pytest.approx((0.5, 1.0), rel=1e-3)
    op_ms = 2 * fit.latency_ms + 1e7 / 2 / (fit.bandwidth_gbps * 1e6)  # CALLS x latency + bytes sent / bw
    assert op_ms == pytest.approx(ops[-1][1], rel=1e-3)


def test_a_link_shape_refuses_nonsense():
    with pytest.raises(InputError, match="--link-gbit"):
        LinkShape(0.0)
    with pytest.raises(InputError, match="--link-delay-us"):
        LinkShape(1.0, -5.0)


@needs_root
def test_every_collective_is_measured_on_both_tiers_over_emulated_hosts(tmp_path):
    from autoshard.core.communication import CommunicationModel
    from cost_model.bench.communication import MODULES, measure_communication

    model = measure_communication(sizes=(4096, 65536), repeats=1, link=LinkShape(1.0), rounds=1)
    model.save(tmp_path / "communication.json")
    assert CommunicationModel.load(tmp_path / "communication.json") == model  # the fits and their points
    assert MODULES in model.measured_on
    assert [f.key for f in model.fits] == list(KEYS)
    for fit in model.fits:
        assert fit.source == "measured" and fit.ranks == 2 and len(fit.points) == 2, fit.key
        assert fit.bandwidth_gbps > 0 and all(ms > 0 for _, ms in fit.points), fit.key
    assert "1 Gbit/s" in model.fit(Collective.ALL_REDUCE, Tier.INTER).link
    assert model.fit(Collective.ALL_REDUCE, Tier.INTRA).link == "loopback"
    assert not [n for n in project_namespaces() if n.startswith(f"{netns.PREFIX}{_own_pid()}-")]


def test_a_tier_left_out_is_declared_not_measured(monkeypatch):
    from cost_model.bench import communication

    def measured_intra(sizes, repeats, device):
        return {"world_size": 2, "backend": "gloo", "points": {c.value: [[1024, 0.1], [8192, 0.5]] for c in Collective}}

    monkeypatch.setattr(communication, "_run_intra", measured_intra)  # the launch is tested above
    model = communication.measure_communication(tiers=[Tier.INTRA], rounds=2)
    assert {f.source for f in model.fits if f.tier is Tier.INTER} == {"declared"}
    assert "inter: declared, not measured" in model.measured_on


def _own_pid() -> int:
    import os

    return os.getpid()


@needs_root
def test_the_hosts_are_removed_after_an_error_inside():
    with pytest.raises(RuntimeError, match="boom"):
        with EmulatedHosts(LinkShape(1.0)) as hosts:
            names = hosts.names
            shown = subprocess.run(hosts.command(1, ["ip", "-o", "addr", "show", netns.LINK]), capture_output=True)
            assert f"{hosts.address(1)}/30" in shown.stdout.decode()  # the host's end of the link
            raise RuntimeError("boom")
    assert not set(names) & set(project_namespaces())


@needs_root
def test_the_hosts_are_removed_when_making_them_fails_and_stale_ones_first():
    stale = f"{netns.PREFIX}999999999-h0"  # a pid that cannot run: a crashed run's namespace
    subprocess.run(["ip", "netns", "add", stale], check=True)
    hosts = EmulatedHosts(LinkShape(1.0))
    subprocess.run(["ip", "netns", "add", hosts.names[1]], check=True)  # in the way: the second add fails
    try:
        with pytest.raises(MeasurementError, match="netns add"):
            with hosts:
                pass
        assert stale not in project_namespaces()
        assert not set(hosts.names) & set(project_namespaces())
    finally:
        for name in (stale, *hosts.names):
            subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)


def test_each_point_keeps_its_fastest_round():
    from cost_model.bench.communication import fastest

    runs = [{"world_size": 2, "points": {"all_to_all": [[1024, 0.5], [8192, 2.0]]}} for _ in range(2)]
    runs[1]["points"]["all_to_all"] = [[1024, 0.3], [8192, 9.0]]  # a busy round
    assert fastest(runs)["points"] == {"all_to_all": [[1024, 0.3], [8192, 2.0]]}


def test_a_failed_launch_is_a_measurement_error_with_its_log_tail(tmp_path):
    from cost_model.bench.communication import _start, _wait

    argv = [sys.executable, "-c", "import sys; print('rank 1 aborted'); sys.exit(3)"]
    with pytest.raises(MeasurementError, match=r"exit 3\):\nrank 1 aborted"):
        _wait([_start(argv, {}, tmp_path / "rank.log")])


def test_a_failed_launch_stops_the_others_at_once(tmp_path):
    import signal

    from cost_model.bench.communication import _start, _wait

    waiting = _start([sys.executable, "-c", "import time; time.sleep(120)"], {}, tmp_path / "host0.log")
    failed = _start([sys.executable, "-c", "import sys; sys.exit(4)"], {}, tmp_path / "host1.log")
    with pytest.raises(MeasurementError, match=r"exit 4"):
        _wait([waiting, failed])
    assert waiting[0].returncode == -signal.SIGTERM  # stopped, not waited for
