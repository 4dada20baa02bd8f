"""Demo: a tiny model with an injected overhead bottleneck; prints the verdict. `python examples/overhead_bound.py`"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import main

if __name__ == "__main__":
    main(["overhead", *sys.argv[1:]])
