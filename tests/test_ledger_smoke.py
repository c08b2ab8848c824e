import pytest

from tms.ledger import Ledger

pytestmark = pytest.mark.anyio


async def test_fresh_database_is_migrated(ledger: Ledger) -> None:
    assert await ledger.pool.fetchval("SELECT count(*) FROM schema_migrations") == 1


async def test_each_test_gets_its_own_database(ledger: Ledger) -> None:
    assert await ledger.pool.fetchval("SELECT count(*) FROM events") == 0
