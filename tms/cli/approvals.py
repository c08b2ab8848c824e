"""`tms approve`, `revoke` and `approved`: who may log in, use the service and create
collections. The keys arrive parsed (`tms.cli.notation.pubkeys`), so that nothing is approved or
revoked unless every key given is good."""

from __future__ import annotations

import sys

from tms.cli.database import open_ledger
from tms.nostr import nip19
from tms.types import PubKey


async def approve(keys: list[PubKey]) -> int:
    async with open_ledger() as ledger:
        newly = set(await ledger.approve(keys))
    for pubkey in keys:
        note = "" if pubkey in newly else " (already approved)"
        print(f"approved {nip19.npub_encode(pubkey)} {pubkey}{note}")
    return 0


async def revoke(keys: list[PubKey]) -> int:
    async with open_ledger() as ledger:
        revoked = set(await ledger.revoke(keys))
    for pubkey in keys:
        done = "revoked" if pubkey in revoked else "was not approved:"
        print(f"{done} {nip19.npub_encode(pubkey)} {pubkey}")
    return 0


async def approved() -> int:
    async with open_ledger() as ledger:
        rows = await ledger.approved()
    for pubkey, approved_at in rows:
        print(f"{nip19.npub_encode(pubkey)} {pubkey} {approved_at}")
    if not rows:
        print("tms: no keys are approved (tms approve NPUB_OR_HEX...)", file=sys.stderr)
    return 0
