"""The ``echomq`` command line: ``main`` (the commands), ``args`` (what they accept), ``views``
(what they print), ``errors`` (one line and an exit code for each failure) and ``demo``.
Nothing imports it but its entry point."""
