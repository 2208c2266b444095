"""The live daemon: sources → newest-frame slot → faces → async swap → composite → sink, with a
watchdog that trades quality for latency. See docs/architecture.md ("`vcamd/live/` — the live daemon")."""
