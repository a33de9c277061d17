"""Microbenchmarks, traces and the neural multi-table cost model."""
