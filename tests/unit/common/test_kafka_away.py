"""Which Kafka errors mean the cluster is away or moving for now (pure)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from common.kafka.clients import kafka_away


def test_away_moving_and_retriable_errors_are_told_from_refusals():
    for code in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError._UNKNOWN_PARTITION, KafkaError.COORDINATOR_LOAD_IN_PROGRESS):
        assert kafka_away(KafkaException(KafkaError(code)))
    assert kafka_away(KafkaException(KafkaError(KafkaError.UNKNOWN, retriable=True)))
    for refused in (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED),
                    KafkaError(KafkaError._TRANSPORT, fatal=True)):
        assert not kafka_away(KafkaException(refused))
    assert not kafka_away(KafkaException("no error inside")) and not kafka_away(ValueError("x"))
