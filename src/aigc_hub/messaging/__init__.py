"""The messaging seam: a broker protocol and its engines (memory, embedded log, Kafka)."""
