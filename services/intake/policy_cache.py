"""The tenants' policy documents as this intake process last read them, so that accepting a
submission costs no statement to read its tenant's policy (issue 24, item 5).

A cached document is never trusted on its own word. The statement that records the intent
(services.intake.intents.claim) holds it to the stamp of the document in force and records
nothing when another one was installed meanwhile, by this process, another intake or the
start-up file; the submission is then checked again under a fresh read
(services.intake.accept). So an intent is recorded only under the document its recording
statement saw in force, as when the policy was read by a statement of its own just before.
"""

import asyncpg

from events.catalog import Catalog
from services.intake import submission_gate

# Tenants remembered at most; past it the longest-known is forgotten (read again when used).
MAX_TENANTS = 10_000


class PolicyCache:
    def __init__(self, max_tenants: int = MAX_TENANTS) -> None:
        self.max_tenants = max_tenants
        self._tenants: dict[str, submission_gate.InForce] = {}

    def known(self, tenant: str) -> submission_gate.InForce | None:
        """The tenant's document as last read, if it was (no statement)."""
        return self._tenants.get(tenant)

    async def read(
        self, conn: asyncpg.Connection, tenant: str, catalog: Catalog
    ) -> submission_gate.InForce:
        """The tenant's document as read now, remembered."""
        known = await submission_gate.in_force(conn, tenant, catalog)
        self._tenants.pop(tenant, None)
        if len(self._tenants) >= self.max_tenants:
            del self._tenants[next(iter(self._tenants))]
        self._tenants[tenant] = known
        return known
