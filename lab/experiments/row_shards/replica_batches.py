"""How a data-parallel replica is priced (B bags of L / W lookups: ``replica(t, W).as_table`` at the
workload's batch) against what its device runs (B / W bags of L lookups), each table alone.

  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=1000000000000 MALLOC_TOP_PAD_=1073741824 \
    nice .venv/bin/python runs/row-shards/replica_batches.py
"""

from dataclasses import replace

import numpy as np

from autoshard.core.synthetic import PoolConfig
from autoshard.core.types import replica
from cost_model.bench.collect import CollectConfig, collection_pool
from cost_model.bench.harness import BenchConfig, measure

pool = collection_pool(CollectConfig(pool=PoolConfig(seed=0), precisions=(4, 2), optimizers=("sgd", "rowwise_adagrad")))
rng = np.random.default_rng(7)
tables = [pool.train[i] for i in rng.choice(len(pool.train), 40, replace=False)]
bench = BenchConfig(batch_size=4096, warmups=1, repeats=7)
ratios: dict[int, list[float]] = {8: [], 64: []}
for i, table in enumerate(tables):
    for world in ratios:
        priced = measure([replica(table, world).as_table], bench, seed=i, min_total_ms=20).total.median
        real = measure([table], replace(bench, batch_size=4096 // world), seed=i, min_total_ms=20).total.median
        ratios[world].append(priced / real)
for world, r in ratios.items():
    q = np.quantile(r, [0.1, 0.5, 0.9])
    print(f"W={world}: B=4096 bags of L/W over B/W bags of L, median {q[1]:.2f} (10%-90%: {q[0]:.2f}-{q[2]:.2f}), n={len(r)}")
