"""Generation's consumer groups, one module each, named like the group (``generation-<name>``).

:mod:`.scheduler` (``generation-scheduler``: a scheduling pass per wake-up),
:mod:`.submitter` (``generation-submitter``: submit and cancel calls to providers),
:mod:`.observer` (``generation-observer``: the one state handler for observations),
:mod:`.poller` (``generation-poller``: provider status queries) and :mod:`.fetcher`
(``generation-fetcher``: output downloads). ``pipeline.py`` declares each group.
"""
