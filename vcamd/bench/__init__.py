"""Bench fixtures, not part of the product: stand-in ONNX models with the production signatures
(`standins`) and a face photo sliding across a video file that plays like a camera (`clips`).
`vcamd bench`, `benchmarks/` and the tests build their inputs with them."""
