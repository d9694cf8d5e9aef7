"""The consumers outside Python run apart (`make test-examples`): they need the JDK and Maven,
which the core suite does not, and `make examples` builds them first. The fixtures are
tests/conftest.py's; its helpers are imported from there too."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
