"""Microbenchmarks: the harness that runs real forward + backward + update of a table set on a
device, resumable (and torchrun-distributed) trace collection, and the communication benchmark."""
