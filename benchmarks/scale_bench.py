"""Scale by simulation (issue 8, item 6); the same as ``autobyte bench scale``.

    .venv/bin/python benchmarks/scale_bench.py [--workers 8,16,32,64,128] [--out runs/scale]
"""

import sys

from common.bench._scale import main

if __name__ == "__main__":
    sys.exit(main())
