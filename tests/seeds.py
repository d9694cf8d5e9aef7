"""The seeds the tests draw their kill, eviction and fault schedules and their events on, each
shifted by LAB_TEST_SEED (a whole number; 0 when unset). `LAB_TEST_SEED=100 make test` runs
the suite on other seeds than its own: every inbox must still credit each event once, and
every control on the same schedule must still fail."""
import os

RAW = os.environ.get("LAB_TEST_SEED", "0")
SHIFT = int(RAW) if RAW.strip().lstrip("-").isdigit() else None  # conftest refuses anything else, in one line


def shifted(seed: int) -> int:
    """A test's own seed, moved by LAB_TEST_SEED."""
    return seed + (SHIFT or 0)
