"""The body of `POST /v1/effects/unrecorded`: an effect recorded without any recon intent."""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.devtools.sandbox.catalog import Operation


class UnrecordedEffect(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    operation: Operation
    payload: dict[str, Any]
    idempotency_key: str | None = Field(default=None, min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)

    def key(self) -> str:
        # Such effects come from outside recon, so they carry none of recon's keys by default.
        if self.idempotency_key is not None:
            return self.idempotency_key
        return f"unrecorded-{secrets.token_hex(12)}"
