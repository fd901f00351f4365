"""Base for every message: frozen, strict about unknown fields, JSON round-trippable."""

import functools
import operator
from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict

_set = object.__setattr__


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """pydantic's shallow copy with `update`, built in one step: the decider folds every
        event into a state by copies (several per event: the state, the operation, its leg),
        and pydantic's generic copy (`__copy__`: `copy.copy` of each of four slots, then an
        update of two of them) was ~5 % of its CPU at concurrency 30. The result is the same:
        the fields' values updated, not validated, and the updated names added to the fields
        set. A deep copy, or a model with extra or private values (none here), takes
        pydantic's own path."""
        extra = self.__pydantic_extra__
        private = getattr(self, "__pydantic_private__", None)
        if deep or extra is not None or private is not None:
            return super().model_copy(update=update, deep=deep)
        cls = type(self)
        copied = cls.__new__(cls)
        if update:
            _set(copied, "__dict__", {**self.__dict__, **update})
            _set(copied, "__pydantic_fields_set__", self.__pydantic_fields_set__ | update.keys())
        else:
            _set(copied, "__dict__", self.__dict__.copy())
            _set(copied, "__pydantic_fields_set__", set(self.__pydantic_fields_set__))
        _set(copied, "__pydantic_extra__", None)
        _set(copied, "__pydantic_private__", None)
        return copied


# What `Field(exclude_if=...)` asks of a value at every serialization, in C: pydantic-core
# calls the predicate per field per dump, and a lambda is a Python call (the decider dumps
# every envelope and its state at each input). absent(v) is `None is v`.
absent = functools.partial(operator.is_, None)
falsy = operator.not_
