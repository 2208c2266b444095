"""The ground floor: what every room of vcamd uses and that imports nothing of vcamd outside this
package — the user-facing errors (`errors`), the types a frame carries (`types`), the quality ladder
(`quality`), the newest-wins hand-offs (`newest`), helper threads (`threads`), SIGTERM from the first
line (`stopping`), values to plain JSON and JSON from strangers (`jsonable`, `boundedjson`), and who is
at the other end of a local connection (`peers`)."""
