import sys

from indexer.cli import main

sys.exit(main())
