"""Version 1 is exactly the schema of the last release before versioned migrations: its
sections are the texts whose digests that release recorded in `schema_applied`, the record
services.migrate recognises such a database by. Editing 0001 breaks this; a change to the
schema is a new migration."""

from support.release_before_migrations import EVERY_PROCESS, digest, sections

from services.migrate import _RELEASE_BEFORE_VERSIONS, CODE_VERSION, migration_ids, version_of


def test_the_baseline_holds_exactly_the_texts_that_release_recorded() -> None:
    _, texts = sections()
    assert sorted(texts) == sorted(EVERY_PROCESS)
    assert {digest(text) for text in texts.values()} == _RELEASE_BEFORE_VERSIONS


def test_the_migrations_are_numbered_one_after_another() -> None:
    ids = migration_ids()
    assert [version_of([i]) for i in ids] == list(range(1, len(ids) + 1))
    assert CODE_VERSION == len(ids)
