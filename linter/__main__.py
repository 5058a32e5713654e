"""``python -m txnsafety_lint PATH...``: the same as ``txnsafety lint PATH...``."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
