"""``python -m benchmarks.report``: see the package's docstring (``--help``)."""

import sys

from benchmarks.report.cli import main

sys.exit(main())
