"""recon's transactional producers retry a refused AddPartitionsToTxn after 2 ms, not
aiokafka's 20 ms (services.kafka_clients.TXN_RETRY_BACKOFF_S). aiokafka is pinned, and the
setting is a module constant it reads at the moment of the retry: if an upgrade renames or
stops reading it, the setting silently does nothing and every back-to-back transaction
waits 20 ms again. The effect itself is measured by the benchmark (`--hops`)."""

import inspect

import aiokafka.producer.sender as sender

from services.kafka_clients import TXN_RETRY_BACKOFF_S


def test_the_concurrent_transactions_retry_waits_recons_backoff() -> None:
    assert sender.BACKOFF_OVERRIDE == TXN_RETRY_BACKOFF_S == 0.002
    # Read at the retry, by name, where the broker answers CONCURRENT_TRANSACTIONS.
    source = inspect.getsource(sender.AddPartitionsToTxnHandler.handle_response)
    assert "ConcurrentTransactions" in source and "return BACKOFF_OVERRIDE" in source
