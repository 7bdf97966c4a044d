"""The shared base every part stands on: configuration, errors, logging, Kafka clients, SQL."""
