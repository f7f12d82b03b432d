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


@pytest.fixture(scope="session")
def clang_build(tmp_path_factory):
    """The kernels built with clang -O2 (skipped without clang)."""
    from _helpers import build_kernels

    so = build_kernels(("clang",), tmp_path_factory.mktemp("clang"), ["-O2"])
    if so is None:
        pytest.skip("clang is not installed (apt-get install clang): the clang build is untested")
    return so


@pytest.fixture
def one_epoch(monkeypatch):
    """Sweeps of one epoch on breast-cancer for one test (:func:`_helpers.set_one_epoch`)."""
    from _helpers import set_one_epoch  # here: the conftest itself stays free of torch

    set_one_epoch(monkeypatch)


@pytest.fixture
def run_notebook(monkeypatch):
    """Execute code cells in a fresh ``python3`` Jupyter kernel, as in a user's notebook.

    Returns a function of the cells' sources that gives the executed cells, with their outputs.
    """
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # a user's kernel: no backend forced from outside (ipykernel then picks the inline one)
    monkeypatch.delenv("MPLBACKEND", raising=False)
    # jupyter_core's paths, without its platformdirs-migration DeprecationWarning
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")

    def run(sources):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        nbclient.NotebookClient(nb, kernel_name="python3", timeout=120).execute()
        return nb.cells

    return run
