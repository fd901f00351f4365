"""services.devtools.txn_streams and kip447: KIP-447's group fence through aiokafka, against
the real broker. The benchmark's KIP-447 figures are only worth reading if a zombie's
transaction is refused, so that is what is checked here, with every way run once."""

import aiokafka.producer.sender as aiokafka_sender

from services.devtools.txn_streams import Shape, measure


async def test_a_member_that_left_the_group_cannot_commit_its_transaction(
    kafka_bootstrap: str, topic_prefix: str
) -> None:
    request = aiokafka_sender.TxnOffsetCommitRequest
    handle = aiokafka_sender.TxnOffsetCommitHandler.handle_response

    (committed, refused), figures = await measure(
        kafka_bootstrap, None, Shape(2, 1, 1, topic_prefix), rounds=2, warmup=0, reps=1
    )

    assert committed, "the member's own transaction, with its generation, did not commit"
    assert refused, "a transaction sent with a left member's generation committed"
    assert set(figures) == {"per partition", "one, KIP-447", "one, unfenced", "one partition"}
    assert all(len(rows) == 1 and rows[0][1] > 0 for rows in figures.values())
    # aiokafka's v0 commit is back for everything else in this process.
    assert aiokafka_sender.TxnOffsetCommitRequest is request
    assert aiokafka_sender.TxnOffsetCommitHandler.handle_response is handle
