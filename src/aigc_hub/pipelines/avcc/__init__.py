"""The avcc pipeline (seed 000, "AIGC-Hub 智视码 (AVCC)", chapter 9): content codes for
AI-generated works — apply, review, chain, code, with the code embedded in the work as C2PA.

- ``pipeline``      the ``Pipeline``: topics, events, consumer groups, routes, scanners
- ``settings``      ``AvccSettings`` (``AIGC_HUB_AVCC_*``)
- ``events``        §9.1 topics, §9.2 payloads (keyed by ``avcc_record_id``, §9.3.2)
- ``models``        the tables; ``states`` the application's state machine; ``records`` load/move
- ``services``      code-svc's precheck and apply (§9.2.1), queries, the public code answer
- ``checks``        review-svc's checks; ``rules`` the rubric (P/G/O, score bands); ``reports``
- ``fingerprints``, ``similarity``, ``likeness``  near-duplicates of coded works
- ``human``         the human review queue: claim with a lease, decide, audited
- ``statements``    what is notarized; ``notary`` chain-svc's batching
- ``merkle``, ``tree_heads``, ``receipts``, ``translog``  the verifiable log (RFC 9162, Ed25519)
- ``chains``        the log chain and the EVM chain; ``adapters/`` the Chain protocol, web3
- ``evm_anchors``, ``evm_tables``, ``translog_tables``  the chains' records and tables
- ``codes``         the code's form and check character (§9.2.4's ``MA.156.10005.8361/…``)
- ``provenance``, ``manifest_store``, ``credentials``  C2PA manifests, the platform's signer
- ``verification``  the proof's form and its offline check (``aigc-hub avcc verify``)
- ``windows``, ``detector``  playback anomalies (the flink-job, §9.2.4): event-time windows
  under a watermark, and the judges of a closed window over river's online statistics
- ``metrics``       avcc's Prometheus metrics (the detector's anomalies and dropped events)
- ``handlers/``     one module per consumer group: review, code, chain, embed, detector
- ``scanners``      watchdogs: stuck records, EVM anchors of unknown outcome
- ``http``, ``cli`` the routes and the ``aigc-hub avcc`` commands
"""
