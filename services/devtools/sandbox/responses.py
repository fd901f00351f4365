"""Error answers of the sandbox: `{"error": <code>, "message": <what to do>}`."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import ValidationError


def error_response(status_code: int, error: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, **extra}, status_code=status_code)


def describe_validation(exc: ValidationError) -> str:
    """One line naming each invalid field and why, for a 422's message."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in exc.errors()
    )
