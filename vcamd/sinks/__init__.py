"""Where published frames go: one module per output, one contract, one table.

`base` (the `Sink` protocol every output and the engine share), `registry` (`open_sink(spec, …)`,
`SINK_FORMS`), and the outputs: `virtual` (the virtual camera, default), `preview` (a local page),
`file` (mp4), `null` (discard). Nothing is imported here, so the CLI can read the registry cheaply.
"""
