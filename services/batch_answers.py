"""How one statement run for many callers answers them: the one rule of the two batchers
(services.intake.shared_statement, which batches the callers that arrive while a statement
runs, on one connection; services.dispatcher.statement_batch, which batches the requests of
one turn of the event loop). They differ in when a batch closes, not in what each caller
gets: its own item's answer, in the order asked; the run's error if the run failed, as its
own statement would have failed; a cancellation if the run was cancelled. A caller that
went away meanwhile (its future done) is passed over.
"""

import asyncio
from collections.abc import Sequence
from typing import TypeVar

In = TypeVar("In")
Out = TypeVar("Out")

Waiting = list[tuple[In, "asyncio.Future[Out]"]]


def answer_each(waiting: "Waiting[In, Out]", answers: Sequence[Out]) -> None:
    """Each caller its item's answer. A run that answered another number of items is wrong
    for every caller: none is answered, and the error is raised for the caller to fail them."""
    if len(answers) != len(waiting):
        raise AssertionError(f"{len(answers)} answers to {len(waiting)} requests")
    for (_, future), answer in zip(waiting, answers, strict=True):
        if not future.done():
            future.set_result(answer)


def fail_each(waiting: "Waiting[In, Out]", error: BaseException) -> None:
    for _, future in waiting:
        if not future.done():
            future.set_exception(error)


def cancel_each(waiting: "Waiting[In, Out]") -> None:
    for _, future in waiting:
        future.cancel()
