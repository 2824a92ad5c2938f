import pytest

import ratomic


@pytest.fixture
def clock() -> ratomic.ManualClock:
    return ratomic.ManualClock()
