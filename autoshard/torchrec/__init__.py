"""Everything that touches TorchRec: the export bridge, TorchRec's planner as a baseline, the drop-in
``ShardingPlanner`` and DMP runs. Needs the ``torchrec`` extra; nothing outside this package imports it."""
