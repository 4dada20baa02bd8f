"""Demo: a tiny model with an injected compute bottleneck; prints the verdict. `python examples/compute_bound.py`"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import main

if __name__ == "__main__":
    main(["compute", *sys.argv[1:]])
