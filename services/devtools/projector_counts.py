"""The projector's Postgres cost over a benchmark's measured run, from its metrics
(`recon_projector_batches`, `recon_projector_statements`): batches and statements per
recon transaction, and statements per batch. Counts, not CPU: comparable across runs on a
busy machine, as long as the load (how many events a batch gathers) is comparable."""

from __future__ import annotations

from collections import Counter

from services.devtools.kafka_counts import metric_samples

_NAMES = {
    "recon_projector_batches_total": "batches",
    "recon_projector_statements_total": "statements",
}


def projector_counts(metrics_urls: list[str]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for sample in metric_samples(metrics_urls):
        name = _NAMES.get(sample.name)
        if name is not None:
            counts[name] += int(sample.value)
    return counts


def projector_table(before: Counter[str], after: Counter[str], transactions: int) -> str:
    done = after - before
    batches, statements = done["batches"], done["statements"]
    return (
        f"projector: {batches} batches = {batches / transactions:.2f} per transaction;"
        f" {statements} Postgres statements = {statements / max(batches, 1):.2f} per batch,"
        f" {statements / transactions:.2f} per transaction"
    )
