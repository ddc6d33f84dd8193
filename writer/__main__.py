import sys

from writer.cli import main

sys.exit(main())
