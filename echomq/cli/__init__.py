"""The ``echomq`` command line: ``main`` (the group, which lists every command and imports each
on first use), the commands by concern — ``jobs`` (one job), ``queues`` (a whole queue),
``dead`` (dead jobs), ``workers`` (``worker`` and the live ones), ``serve`` (a server, the
dashboard), ``tools`` (demo, bench, conformance) —, what they share (``common``), what they
accept (``args``), what they print (``views``), ``errors`` (one line and an exit code for each
failure) and ``demo``. No command imports the group; nothing imports the command line but its
entry point."""
