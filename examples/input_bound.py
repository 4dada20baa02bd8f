"""Demo: a tiny model with an injected input bottleneck; prints the verdict. `python examples/input_bound.py`"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scenarios import main

if __name__ == "__main__":
    main(["input", *sys.argv[1:]])
