"""`sluice dev produce`, as the README has a new user fill the example spec's topic, against the real dev broker."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from sluice.cli import main
from sluice.dev.tansu import DevKafkaBroker


def test_dev_produce_creates_the_topic_and_fills_it_with_the_sample(kafka_broker: DevKafkaBroker,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    main(["dev", "produce", "--bootstrap-servers", bootstrap, "--topic", "dev_produce", "--events", "1000"])
    assert "end offsets: 0: 250, 1: 250, 2: 250, 3: 250" in capsys.readouterr().out
    topic = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics["dev_produce"]
    assert len(topic.partitions) == 4
    # again into the topic that now exists: appended, over its own partitions
    main(["dev", "produce", "--bootstrap-servers", bootstrap, "--topic", "dev_produce", "--events", "400",
          "--partitions", "9"])
    assert "end offsets: 0: 350, 1: 350, 2: 350, 3: 350" in capsys.readouterr().out
