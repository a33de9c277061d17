import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def autoshard_cmd() -> list[str]:
    """The installed console command, or the module under this interpreter."""
    exe = shutil.which("autoshard", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    return [exe] if exe else [sys.executable, "-m", "autoshard"]


@pytest.fixture
def tiny_collect_args(tmp_path):
    """CLI options for a collection that takes seconds: a small pool, small tables, a small batch."""
    return [
        "--device",
        "cpu",
        "--pool-size",
        "8",
        "--max-tables",
        "3",
        "--batch-sizes",
        "64",
        "--warmups",
        "1",
        "--repeats",
        "3",
        "--row-cap-mb",
        "1",
        "--mode",
        "embedding_bag",
    ]


SHIPPED_PROFILE = ROOT / "data" / "models" / "cpu-amd-epyc-fbgemm_tbe-t1"


@pytest.fixture(scope="session")
def shipped_model():
    """The shipped profile's cost model, loaded once (tests that change it restore it)."""
    from cost_model.checkpoint import load_cost_model

    return load_cost_model(SHIPPED_PROFILE)
