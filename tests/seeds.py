"""The seeds the tests draw their kill, eviction and fault schedules and their events on, each
shifted by LAB_TEST_SEED (a whole number, 0 or more; 0 when unset). `LAB_TEST_SEED=100 make test` runs
the suite on other seeds than its own: every inbox must still credit each event once, and
every control on the same schedule must still fail."""
import os


def shift_of(raw: str) -> int | None:
    """LAB_TEST_SEED as a shift, or None (conftest then refuses it in one line): a whole number
    of 0 or more, since random.Random(-n) draws what random.Random(n) does."""
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if value >= 0 else None


RAW = os.environ.get("LAB_TEST_SEED", "0")
SHIFT = shift_of(RAW)


def shifted(seed: int) -> int:
    """A test's own seed, moved by LAB_TEST_SEED."""
    return seed + (SHIFT or 0)
