"""What is wrong with the running settings now, by topic: the one source of the status'
`config_error` (broken file, models, camera, output, enhancer, source face, consent, restart)."""

from __future__ import annotations


class Problems:
    """One message per topic, said until cleared. Written on the loop's thread only."""

    def __init__(self) -> None:
        self._by_topic: dict[str, str] = {}

    def report(self, topic: str, message: str) -> None:
        self._by_topic[topic] = message

    def clear(self, topic: str) -> None:
        self._by_topic.pop(topic, None)

    def text(self) -> str | None:
        return "; ".join(self._by_topic.values()) or None
