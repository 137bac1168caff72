import copy
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def demo_config_raw() -> dict:
    """config/demo.yaml as written (before validation fills in defaults)."""
    return yaml.safe_load((REPO / "config" / "demo.yaml").read_text())


@pytest.fixture
def demo_config(demo_config_raw) -> dict:
    from sdbench.config import validate_config

    return validate_config(copy.deepcopy(demo_config_raw))
