"""M9's tests run apart (`make test-frameworks`): they need the frameworks' environments
(`make setup-frameworks`, Quix in a venv of its own), which the core suite does not. The
fixtures are tests/conftest.py's; its helpers are imported from there too."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
