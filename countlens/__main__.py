import sys

from countlens.cli import main

sys.exit(main())
