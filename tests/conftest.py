import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(params=["numpy", "torch"])
def backend(request):
    """Convert a numpy array to the parametrised backend (numpy array or torch tensor)."""
    if request.param == "numpy":
        return lambda a: a
    torch = pytest.importorskip("torch")
    return lambda a: torch.from_numpy(np.ascontiguousarray(a))
