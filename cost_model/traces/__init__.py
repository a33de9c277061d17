"""Traces: append-only storage of measured table sets, their summary, drift against a profile,
and calibration of a model to this machine."""
