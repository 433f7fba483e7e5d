import sys

from benchmarks.models.run import main

sys.exit(main())
