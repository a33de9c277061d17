"""The core: frozen data types, typed errors, the cost-model interfaces, tasks and suites,
workload files and presets. It imports nothing else of the project."""
