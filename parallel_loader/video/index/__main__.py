"""``python -m parallel_loader.video.index ROOT_OR_LIST``: make a data set's indexes ahead of time."""

import sys

from .._commands.index import main

if __name__ == "__main__":
    sys.exit(main())
