"""The decider's one log line per dispatch: the moment an operation key is sent on its way,
with `op_key` and `attempt` bound to it (services.logging_json), so the key is found in
the decider's log as in the dispatcher's. Only dispatches are logged: a line per event
would cost every transaction several lines of formatting for what recon.events holds."""

import logging

from events.definition import Leg
from events.envelope import Envelope
from services.logging_json import log_context

log = logging.getLogger("services.decider")


def log_dispatches(envelopes: list[Envelope]) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    for envelope in envelopes:
        if envelope.type != "OperationDispatched":
            continue
        data = envelope.data
        with log_context(op_key=data["op_key"], attempt=data["attempt"]):
            log.info(
                "%s %s dispatched (%s, attempt %d)",
                envelope.tx_id,
                data["action"],
                data.get("leg", Leg.FORWARD.value),
                data["attempt"],
            )
