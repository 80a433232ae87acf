"""The vistack consumer groups' handlers: ``consumer.py`` dispatches the seed's one group's
records by type to ``transcode.py``, ``delete_file.py`` and ``comment.py``; ``danmaku.py``
is the batch writers' handler."""
