"""The maintained benchmarks: each a script (``python benchmarks/X.py``) and a module
(``python -m benchmarks.X``); ``python -m benchmarks.report`` runs them and writes docs/benchmarks.md."""
