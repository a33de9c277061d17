"""One rank of a DMP verification launched by torchrun inside an emulated host
(``autoshard.torchrec.dmp_launch``): ``python -m autoshard.torchrec.dmp_rank JOB``, where ``JOB``
is the pickle of the rank's arguments; torchrun's ``RANK`` says which rank it is."""

from __future__ import annotations

import os
import pickle
import sys


def main(argv: list[str]) -> None:
    from autoshard.torchrec.dmp_verify import _rank

    with open(argv[0], "rb") as f:
        job = pickle.load(f)  # written by this run's parent: dmp_launch.run_in_namespaces
    _rank(int(os.environ["RANK"]), job[0], None, *job[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
