import pytest


@pytest.fixture
def torch():
    return pytest.importorskip("torch")
