"""Binlog producer: reads the binlog and writes Debezium-style change events to Kafka."""
