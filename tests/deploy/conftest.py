from tests.integration.conftest import traffic  # noqa: F401
