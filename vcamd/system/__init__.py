"""vcamd in its operating system: logging to stderr and a log file (`logs`), the process's memory cap
(`memory`), the start-up entry (`service`), the virtual camera device outside vcamd (`v4l2loopback`)
and the files shipped for them (`packaged`)."""
