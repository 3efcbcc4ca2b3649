"""The pure core, no I/O: path and content rules, the records State keeps, the
decision tables, mount settings and counters."""
