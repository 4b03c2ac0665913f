"""``python -m parallel_loader.video.check SOURCE``: list the videos that cannot be read, before training.

See :doc:`/video/checks`.
"""

import sys

from ._commands.check import check_file, check_videos, find_videos, main

__all__ = ["check_file", "check_videos", "find_videos", "main"]

if __name__ == "__main__":
    sys.exit(main())
