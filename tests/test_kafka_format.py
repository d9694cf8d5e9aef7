"""Kafka's storage format step, for real (the JDK and the jars `make` fetched), on any cluster ID.
No running service is needed: a fresh data directory per test."""
import pytest

from lab import stack

# A real ID from a CI failure elsewhere: one in 64 of the URL-safe base64 IDs starts with '-'.
DASH_FIRST = "-f_5rGTAQYmTztSSUAVNuQ"


@pytest.mark.parametrize("cluster_id", [DASH_FIRST, "AbC-dEf_GhIjKlMnOpQrSt", stack.new_cluster_id()],
                         ids=["dash-first", "dash-inside", "fresh"])
def test_the_storage_format_takes_any_cluster_id(cluster_id, tmp_path):
    config = tmp_path / "server.properties"
    config.write_text(stack.kafka_properties(59990, "localhost", data=tmp_path / "data"))
    log_config = tmp_path / "log4j2.properties"
    log_config.write_text("rootLogger.level=WARN\n")
    stack.format_storage(stack.require_java(), config, log_config, cluster_id)
    assert f"cluster.id={cluster_id}\n" in (tmp_path / "data" / "meta.properties").read_text()


def test_new_cluster_ids_hold_no_dash():
    # The old generator would have made about 30 IDs with a leading '-' (and 600 with one inside) in 2,000.
    ids = [stack.new_cluster_id() for _ in range(2000)]
    assert not [i for i in ids if "-" in i]
    assert len(set(ids)) == 2000 and {len(i) for i in ids} == {22}
