"""Running a model on ONNX Runtime, below everything that runs one (`faces/`, `remote/`, the pipeline):
sessions and providers (`runtime`), the cores the swap model gets (`cores`), the optimised graph kept
on disk (`ortcache`), what vcamd reads from ONNX files itself (`onnxwire`), the precision a model runs
at (`precision`), its int8 copies kept (`int8cache`) and the check of a copy against float (`fidelity`)."""
