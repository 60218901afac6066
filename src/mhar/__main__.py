import sys

from mhar.cli import main

sys.exit(main())
