"""AutoShard: shard embedding tables across devices with a learned cost model."""
