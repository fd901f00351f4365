"""The benchmark's Postgres statement counts (services.devtools.pg_counts): each service's
own role in its database URL, and the table per transaction by process and by statement."""

from collections import Counter

from services.devtools.pg_counts import Statements, service_env, statement_table


def test_each_service_connects_to_the_same_database_as_its_own_role() -> None:
    env = service_env("postgresql://postgres@127.0.0.1:15692/postgres", ["intake", "projector"])

    assert env == {
        "intake": {"RECON_DATABASE_URL": "postgresql://bench_intake@127.0.0.1:15692/postgres"},
        "projector": {
            "RECON_DATABASE_URL": "postgresql://bench_projector@127.0.0.1:15692/postgres"
        },
    }


def test_the_table_counts_per_transaction_by_process_and_by_statement() -> None:
    counts: Statements = Counter(
        {
            ("intake", "INSERT INTO intents ..."): 20,
            ("intake", "UPDATE intents SET produced = true ..."): 20,
            ("projector", "BEGIN"): 30,
            ("dispatcher", "SELECT tenant, version FROM governance_policies"): 50,
        }
    )

    table = statement_table(counts, 10, idle={"dispatcher": 5.0}, seconds=8.0, top=2)

    lines = table.splitlines()
    assert lines[0] == "Postgres statements: 120 = 12.00 per transaction"
    by_process = {line.split()[0]: line.split()[1:] for line in lines[2:6]}
    # statements, per tx, idle per s, per tx above what 8 s of idle runs
    assert by_process["dispatcher"] == ["50", "5.00", "5.0", "1.00"]
    assert by_process["intake"] == ["40", "4.00", "0.0", "4.00"]
    assert by_process["total"] == ["120", "12.00", "5.0", "8.00"]
    assert "   5.00 dispatcher  SELECT tenant, version FROM governance_policies" in lines
    assert "   3.00 projector   BEGIN" in lines
    assert lines[-1] == "   4.00 (2 others)"
