import pytest

from aftertrace.server.settings import Settings


@pytest.fixture
def settings(tmp_path):
    return Settings.from_env(home=tmp_path / "home")
