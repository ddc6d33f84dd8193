import sys

from timeline.cli import main

sys.exit(main())
