"""Refusals the API answers with `{"error": code, "message": what to fix}`."""


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, str]:
        return {"error": self.code, "message": self.message}
