import sys

from metadata_table.cli import main

sys.exit(main())
