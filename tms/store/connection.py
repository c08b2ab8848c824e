"""What the store's callers hold: a connection (its own or a pool's) and a pool. Its own module
so that the modules `tms.store.database` uses (`tms.store.citus`) can name them too."""

from __future__ import annotations

import asyncpg
from asyncpg.pool import PoolConnectionProxy

Connection = asyncpg.Connection | PoolConnectionProxy
Pool = asyncpg.Pool
