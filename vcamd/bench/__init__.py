"""`vcamd bench` (`settings`, `scenarios`, `report`) and the fixtures it, `benchmarks/` and the tests
build their inputs and measure with — not part of the product: stand-in ONNX models with the
production signatures (`standins`), a face photo sliding across a video file that plays like a camera
(`clips`), reference pastes (`pastes`), a synthetic hand over a face (`hands`), and the privacy
measures: how recognisable an obscured face is (`obscured`) and the end-to-end leak check (`leaks`)."""
