import sys

from coscheduling.cli import main

sys.exit(main())
