"""Kafka clients, topics and offsets shared by the producer, the merge job and the tools."""
