"""The contract's codecs: how its records are written and read as bytes.

:mod:`~contract.codecs.serde` frames records (Avro single-object or Confluent framing, JSON)
and reads them back; :mod:`~contract.codecs.avro_decoder` compiles a writer schema into a
decoder (generated Python, or the C reader :mod:`contract.codecs._avro_reader` where it is
built); :mod:`~contract.codecs.connect_json` writes and reads Kafka Connect's JsonConverter
shape (``debezium-json``).  They sit over the rest of :mod:`contract`: they import the
envelope's names and the contract's errors, and nothing in the contract imports them.
"""
