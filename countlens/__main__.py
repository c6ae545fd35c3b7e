"""``python -m countlens``: the same entry point as the ``countlens`` command."""

import sys

from countlens.pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
