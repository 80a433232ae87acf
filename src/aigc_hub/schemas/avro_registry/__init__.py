"""A Confluent-compatible Avro schema registry kept in the hub's database (seed 003 §9).

Producers and consumers that speak Avro (confluent-kafka's ``AvroSerializer`` and
``AvroDeserializer``) register and fetch schemas here; the HTTP face is
``aigc_hub.interfaces.http.schema_registry``, served under ``/schema-registry``.

* ``tables``: schemas by id, subjects' versions, compatibility levels.
* ``parsing``: an Avro text made into a checked value with its identity (canonical form).
* ``compatibility``: the seven levels and the reader/writer check (``avro.compatibility``).
* ``records``: typed results, subject names and version ids.
* ``rows``: the SQL the stores share (a subject's rows, the retried write, the audit line).
* ``levels``: the compatibility levels configured, the registry's and subjects' own.
* ``store``: ``AvroRegistry``, the operations (register, look up, check, delete).
* ``errors``: what can go wrong, each with its Confluent ``error_code``.
"""
