import sys

from rscale.cli import main

sys.exit(main())
