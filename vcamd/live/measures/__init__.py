"""Measures: the live numbers (`numbers`, `stats`) and the watchdog that walks the quality ladder
from them (`watchdog`)."""
