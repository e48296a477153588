"""pytest configuration of dcp's Python tests: the ``gpu`` marker (tests that need a CUDA device
and skip, saying so, where none is present; ctest runs them as python.attention_gpu, label gpu)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped with the reason where none is present")
