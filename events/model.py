"""Base for every message: frozen, strict about unknown fields, JSON round-trippable."""

from pydantic import BaseModel, ConfigDict


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
