"""`python -m pdserve.bench.peers` (see main.py and README.md)."""

import sys

from pdserve.bench.peers.main import main

if __name__ == "__main__":
    sys.exit(main())
