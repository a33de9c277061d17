"""Data types, the workload file format, the synthetic generator and the bundled workloads."""

import json
from dataclasses import replace

import numpy as np
import pytest

from autoshard.core.errors import InputError
from autoshard.core.presets import PRESETS, load_preset
from autoshard.core.synthetic import PoolConfig, generate_pool, sample_task
from autoshard.core.types import (
    GIB,
    MAX_DEVICE_GB,
    MAX_DEVICES,
    Optimizer,
    Table,
    Topology,
    Workload,
)
from autoshard.core.workload_file import (
    load_workload,
    save_workload,
    workload_from_dict,
)
from cost_model.features import FeatureCache


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"num_embeddings": 0}, "num_embeddings"),
        ({"num_embeddings": 2.5}, "num_embeddings"),
        ({"embedding_dim": 0}, "embedding_dim"),
        ({"pooling_factor": 0.0}, "pooling_factor"),
        ({"pooling_factor": float("nan")}, "pooling_factor"),
        ({"zipf_alpha": -0.1}, "zipf_alpha"),
        ({"zipf_alpha": 3.5}, "zipf_alpha"),
        ({"bytes_per_element": 3}, "bytes_per_element"),
        ({"name": ""}, "name"),
        ({"num_embeddings": 10**13}, "num_embeddings"),  # past every bound below: an error, not an int64 overflow
        ({"embedding_dim": 2**17}, "embedding_dim"),
        ({"pooling_factor": 1e7}, "pooling_factor"),
    ],
)
def test_table_rejects_bad_values_naming_the_field(kwargs, field):
    args = {"name": "t", "num_embeddings": 10, "embedding_dim": 8, **kwargs}
    with pytest.raises(InputError) as info:
        Table(**args)
    assert info.value.field == field
    assert field in str(info.value)


def test_memory_is_derived_from_shape_and_optimizer():
    t = Table("t", 1000, 64)
    assert t.memory_bytes == 1000 * 64 * 4
    assert Table("t", 1000, 64, bytes_per_element=2).memory_bytes == 1000 * 64 * 2
    assert Table("t", 1000, 64, optimizer=Optimizer.ROWWISE_ADAGRAD).memory_bytes == 1000 * 64 * 4 + 1000 * 4
    assert Table("t", 1000, 64, optimizer=Optimizer.ADAGRAD).memory_bytes == 2 * 1000 * 64 * 4


def test_a_cache_of_tables_named_alike_finds_each_in_one_comparison(monkeypatch):
    """Caches keyed by table outlive a request (the cost model's, in a server); users name their
    tables alike from one workload to the next. Hashed by name alone, a lookup compared the table
    with every cached one of that name, and planning slowed with each workload served."""
    cache = FeatureCache(row_cap_bytes=128 << 20)
    sweep = [Table("t0", 1_000 + i, 16 * (1 + i % 4), 1.0 + i % 7) for i in range(400)]  # one name, 400 shapes
    first = cache(sweep, 2048)
    comparisons = 0
    equal = Table.__eq__

    def counted(a, b):
        nonlocal comparisons
        comparisons += 1
        return equal(a, b)

    monkeypatch.setattr(Table, "__eq__", counted)
    again = cache([replace(t) for t in sweep], 2048)  # equal tables, other objects: as the next request brings
    np.testing.assert_array_equal(first, again)
    assert comparisons <= 2 * len(sweep)  # one per table found (hashed by name: ~80,000)


def test_workload_and_topology_validation():
    with pytest.raises(InputError, match="duplicate table name 'a'"):
        Workload((Table("a", 1, 1), Table("a", 2, 2)))
    with pytest.raises(InputError, match="at least one table"):
        Workload(())
    with pytest.raises(InputError, match="batch_size"):
        Workload((Table("a", 1, 1),), batch_size=0)
    with pytest.raises(InputError, match="num_devices"):
        Topology(0, 1.0)
    with pytest.raises(InputError, match="device_memory_gb"):
        Topology(2, -1)
    with pytest.raises(InputError, match="batch_size"):
        Workload((Table("a", 1, 1),), batch_size=2**31)
    with pytest.raises(InputError, match="num_devices"):  # arrays of 10^20 devices took every byte of memory
        Topology(10**20, 1.0)
    with pytest.raises(InputError, match="device_memory_gb"):  # bytes past int64: the planners' arrays overflowed
        Topology(2, 1e15)
    assert Topology(MAX_DEVICES, MAX_DEVICE_GB).device_memory_bytes * MAX_DEVICES < 2**63
    assert Topology(2, 1.5).device_memory_bytes == int(1.5 * GIB)


def _file(tmp_path, data):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.mark.parametrize(
    "tables, expected",
    [
        (
            [
                {"name": "a", "num_embeddings": 10, "embedding_dim": 4},
                {"name": "b", "num_embeddings": -1, "embedding_dim": 4},
            ],
            "tables[1] 'b': num_embeddings: must be an integer >= 1",
        ),
        ([{"name": "a", "num_embeddings": 10}], "tables[0] 'a': embedding_dim: is required"),
        (
            [{"name": "a", "num_embeddings": 10, "embedding_dim": 4, "embeding_dim": 4}],
            "tables[0] 'a': embeding_dim: unknown field",
        ),
        ([{"name": "a", "num_embeddings": 10, "embedding_dim": 4, "zipf_alpha": 9}], "tables[0] 'a': zipf_alpha"),
        (
            [{"name": "a", "num_embeddings": 10, "embedding_dim": 4, "optimizer": "adam"}],
            "tables[0] 'a': optimizer: unknown optimizer",
        ),
        (
            [
                {"name": "a", "num_embeddings": 10, "embedding_dim": 4},
                {"name": "a", "num_embeddings": 1, "embedding_dim": 4},
            ],
            "duplicate table name",
        ),
        ([], "tables: must be a non-empty list"),
    ],
)
def test_bad_files_name_the_table_and_field(tmp_path, tables, expected):
    with pytest.raises(InputError) as info:
        load_workload(_file(tmp_path, {"tables": tables}))
    assert expected in str(info.value)
    assert str(tmp_path / "w.json") in str(info.value)


def test_bad_json_and_bad_topology(tmp_path):
    with pytest.raises(InputError, match="not valid JSON"):
        load_workload(_file(tmp_path, "{not json"))
    with pytest.raises(InputError, match="topology: num_devices"):
        load_workload(
            _file(
                tmp_path,
                {
                    "tables": [{"name": "a", "num_embeddings": 1, "embedding_dim": 4}],
                    "topology": {"num_devices": 0, "device_memory_gb": 1},
                },
            )
        )


def test_file_round_trip(tmp_path):
    workload = Workload((Table("a", 10, 4, 2.5, 1.1), Table("b", 7, 8, optimizer=Optimizer.ADAGRAD)), 512, "w")
    save_workload(tmp_path / "w.json", workload, Topology(4, 2.0))
    assert load_workload(tmp_path / "w.json") == (workload, Topology(4, 2.0))


def test_torchrec_field_names_and_defaults():
    workload, topology = workload_from_dict({"tables": [{"name": "a", "num_embeddings": 5, "embedding_dim": 4}]})
    assert workload.tables[0] == Table("a", 5, 4, pooling_factor=1.0, zipf_alpha=0.0)
    assert topology is None and workload.batch_size == 2048


def test_generator_is_deterministic_and_split():
    a, b = generate_pool(PoolConfig(size=200, seed=3)), generate_pool(PoolConfig(size=200, seed=3))
    assert a == b
    assert generate_pool(PoolConfig(size=200, seed=4)) != a
    assert len(a.test) == 40 and len(a.train) == 160
    assert not {t.name for t in a.train} & {t.name for t in a.test}


def test_generator_is_production_like():
    tables = generate_pool(PoolConfig(size=2000, seed=0)).all
    rows = np.array([t.num_embeddings for t in tables])
    pooling = np.array([t.pooling_factor for t in tables])
    assert rows.min() < 1_000 and rows.max() > 10**7  # heavy-tailed rows
    assert {t.embedding_dim for t in tables} == {4, 8, 16, 32, 64, 128, 256}
    assert pooling.min() == 1.0 and pooling.max() > 100 and np.median(pooling) < 5
    assert len({t.zipf_alpha for t in tables}) > 50


FIRST_OF_SEED_3 = (302, 16, 1.2, 0.13)  # rows, dim, pooling, skew of the first table, before dims were settable


def test_a_pool_can_be_criteo_like_and_the_default_pool_is_unchanged():
    # every table one-hot, of the dims asked for (Criteo's tables: one-hot, dims 16-128)
    tables = generate_pool(PoolConfig(size=300, seed=15, min_log10_rows=0, dims=(8, 16, 32), one_hot_share=1)).all
    assert {t.pooling_factor for t in tables} == {1.0} and {t.embedding_dim for t in tables} == {8, 16, 32}
    assert min(t.num_embeddings for t in tables) < 10
    # the default draws are the ones every shipped trace, grid and test was made with
    first = generate_pool(PoolConfig(size=200, seed=3)).all[0]
    assert (first.num_embeddings, first.embedding_dim, first.pooling_factor, first.zipf_alpha) == FIRST_OF_SEED_3
    for bad, field in (({"dims": (0, 16)}, "dims"), ({"one_hot_share": 1.5}, "one_hot_share")):
        with pytest.raises(InputError, match=field):
            PoolConfig(**bad)


def test_task_sampler_draws_distinct_tables():
    pool = generate_pool(PoolConfig(size=100, seed=1))
    task = sample_task(pool.test, 15, np.random.default_rng(0))
    assert len({t.name for t in task.tables}) == 15
    assert set(task.tables) <= set(pool.test)
    with pytest.raises(InputError, match="num_tables"):
        sample_task(pool.test, 100, np.random.default_rng(0))


def test_bundled_workloads_cite_sources():
    for name in PRESETS:
        workload, _ = load_preset(name)
        assert len(workload.tables) == 26
    criteo, _ = load_preset("criteo_terabyte")
    assert max(t.num_embeddings for t in criteo.tables) == 40_000_000
    assert {t.embedding_dim for t in criteo.tables} == {128}
    assert criteo.tables[20].pooling_factor == 100
    from importlib import resources

    for name in PRESETS:
        data = json.loads((resources.files("autoshard.core.presets") / f"{name}.json").read_text())
        assert "source" in data and len(data["source"]) > 40


def test_uncapped_criteo_terabyte_is_the_raw_counts_that_mlperf_caps_at_40m():
    capped, _ = load_preset("criteo_terabyte")
    raw, _ = load_preset("criteo_terabyte_uncapped")
    assert [min(t.num_embeddings, 40_000_000) for t in raw.tables] == [t.num_embeddings for t in capped.tables]
    assert [replace(t, num_embeddings=1) for t in raw.tables] == [replace(t, num_embeddings=1) for t in capped.tables]
    assert sum(t.num_embeddings for t in raw.tables) == 882_774_559  # the 1TB logs' distinct values, all 26 features
    assert max(t.num_embeddings for t in raw.tables) == 292_775_614 and raw.batch_size == capped.batch_size


# ---------------------------------------------------------------------------------------------
# suites: tasks on clusters, and the bundled multi-host suites (issue 51)


def _suite(tmp_path, *tasks):
    from autoshard.core.task import load_suite

    path = tmp_path / "s.json"
    path.write_text(json.dumps({"tasks": list(tasks)}))
    return load_suite(path)[1]


SYN8 = {"pool_size": 500, "pool_seed": 0, "split": "test", "num_tables": 8, "seed": 1}


def test_a_suite_task_gives_hosts_devices_per_host_and_per_device_memory(tmp_path):
    from autoshard.core.task import memory_for

    cluster, derived, listed, slack, single = _suite(
        tmp_path,
        {"name": "c", "workload": "criteo_kaggle", "num_hosts": 2, "devices_per_host": 4, "device_memory_gb": 2},
        {"name": "d", "workload": "criteo_kaggle", "num_hosts": 2, "num_devices": 8, "device_memory_gb": 2},
        {
            "name": "l",
            "workload": "criteo_kaggle",
            "num_hosts": 2,
            "devices_per_host": 2,
            "device_memory_gb": [2, 2, 3, 4],
        },
        {"name": "s", "synthetic": SYN8, "num_hosts": 4, "devices_per_host": 2, "memory_slack": 1.5},
        {"name": "o", "workload": "criteo_kaggle", "num_devices": 4, "device_memory_gb": 2},  # as before
    )
    assert cluster.topology == Topology.cluster(2, 4, 2) == derived.topology
    assert (cluster.topology.num_devices, cluster.topology.host_of(4)) == (8, 1)
    assert listed.topology.device_memory_caps_gb == (2, 2, 3, 4) and listed.topology.local_world_size == 2
    assert slack.topology == Topology.cluster(4, 2, memory_for(slack.workload, 8, 1.5))
    assert single.topology == Topology(4, 2) and single.topology.num_hosts == 1


def test_a_suite_task_on_a_workload_file_keeps_its_bandwidths_and_may_set_its_own_hosts(tmp_path):
    capped, _ = load_preset("criteo_kaggle")
    workload_file = tmp_path / "w.json"
    save_workload(workload_file, capped, Topology.cluster(2, 2, 3.0, inter_host_bw_gbps=25.0))
    as_filed, regrouped = _suite(
        tmp_path,
        {"workload": str(workload_file)},
        {"workload": str(workload_file), "num_hosts": 4, "devices_per_host": 2},
    )
    assert as_filed.topology == Topology.cluster(2, 2, 3.0, inter_host_bw_gbps=25.0)
    assert regrouped.topology == Topology.cluster(4, 2, 3.0, inter_host_bw_gbps=25.0)


@pytest.mark.parametrize(
    "task, expected",
    [
        ({"num_hosts": 3, "num_devices": 8, "device_memory_gb": 2}, "num_hosts: 8 devices do not divide evenly"),
        ({"num_hosts": 2, "devices_per_host": 4, "num_devices": 6, "device_memory_gb": 2}, "devices_per_host"),
        ({"num_hosts": 0, "devices_per_host": 4, "device_memory_gb": 2}, "num_hosts: must be an integer >= 1"),
        ({"num_hosts": 2, "devices_per_host": "4", "device_memory_gb": 2}, "devices_per_host: must be an integer"),
        ({"num_hosts": 2, "device_memory_gb": 2}, "num_devices: is required"),
        ({"num_hosts": 1, "devices_per_host": 2, "device_memory_gb": [1, 2, 3]}, "per-device values"),
    ],
)
def test_a_bad_cluster_task_names_the_task_and_the_field(tmp_path, task, expected):
    with pytest.raises(InputError) as error:
        _suite(tmp_path, {"name": "x", "synthetic": SYN8, **task})
    assert expected in str(error.value) and "tasks[0]" in str(error.value)


def test_the_giants_suite_has_tables_no_device_holds_on_one_to_four_hosts_of_eight():
    from autoshard.core.task import load_suite

    name, tasks = load_suite("giants")
    assert name == "giants" and 6 <= len(tasks) <= 9
    assert {(t.topology.num_hosts, t.topology.devices_per_host) for t in tasks} == {(1, 8), (2, 8), (4, 8)}
    for task in tasks:
        largest = max(t.memory_bytes for t in task.workload.tables)
        assert largest > task.topology.device_memory_bytes, task.name  # binding: only split tables fit
        assert 1.2 <= task.topology.total_memory_bytes / task.workload.memory_bytes <= 1.5, task.name
    rows = {t.name: max(x.num_embeddings for x in t.workload.tables) for t in tasks}
    assert rows["criteo_tb_2x8"] == 40_000_000 and rows["criteo_tb_uncapped_2x8"] == 292_775_614
    synthetic = [t for t in tasks if t.name.startswith("syn")]
    assert synthetic and all(sum(x.num_embeddings >= 10**8 for x in t.workload.tables) >= 2 for t in synthetic)


def test_the_hosts_suite_spreads_ordinary_pools_over_two_to_sixteen_hosts():
    from autoshard.core.task import load_suite

    name, tasks = load_suite("hosts")
    assert name == "hosts" and 5 <= len(tasks) <= 9
    shapes = {(t.topology.num_hosts, t.topology.devices_per_host) for t in tasks}
    assert {(2, 4), (2, 8), (4, 8), (8, 8), (16, 8)} <= shapes
    for task in tasks:
        assert max(t.memory_bytes for t in task.workload.tables) <= task.topology.device_memory_bytes
        assert all(t.name.startswith("syn0_") for t in task.workload.tables)  # the default suite's kind of pool
