from tests.integration.conftest import broker, coordinator, fleet, traffic  # noqa: F401
