"""The pipeline floor, above the rooms: the ``countlens`` dispatcher, ``reproduce`` (every experiment as a
resumable stage), ``study`` (several models) and the report page. It composes the rooms' configs; no room
imports it."""
