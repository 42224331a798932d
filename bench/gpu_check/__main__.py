"""`python -m pdserve.bench.gpu_check`: see cli.py."""

from pdserve.bench.gpu_check.cli import main

if __name__ == "__main__":
    main()
