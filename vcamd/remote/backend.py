"""A served model inside Triton's own Python backend: the `TritonPythonModel` each model's `model.py` names.

Triton's Python backend runs this in its stub process, one per model instance, and hands it the
requests over the backend's shared memory: no second process between Triton and the model.
`initialize` loads the model as `vcamd serve` checked it (`serve.served_models`, the role's own
class, ONNX Runtime with the server's providers); `execute` turns the batch Triton formed into one
run of the model (`ServedModel.infer`) and answers each request with its rows.

Runs only inside the stub (`triton_python_backend_utils` is the backend's module); nothing here
writes or logs a tensor: a failed run answers its requests with the error, which names the model.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from vcamd.remote.tritonserver import CONFIG_PARAMETER, ROLE_PARAMETER, TABLE_FILE


class TritonPythonModel:
    """Triton's Python backend interface: `initialize` and `execute` (the stub ends with its model: no `finalize`)."""

    def initialize(self, args: dict[str, str]) -> None:
        from pathlib import Path

        from vcamd.config.reading import config_from_dict
        from vcamd.remote.serve import served_emap, served_models

        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        name = args["model_name"]
        if parameters[ROLE_PARAMETER] == "emap":
            table = Path(args["model_repository"]) / args["model_version"] / TABLE_FILE
            self.model = served_emap(name, np.load(table, allow_pickle=False))
            self.inputs = [n for n, _, _ in self.model.inputs]
            return
        cfg = config_from_dict(json.loads(Path(parameters[CONFIG_PARAMETER]).read_text(encoding="utf-8")), "vcamd serve")
        found = [m for m in served_models(cfg, roles={parameters[ROLE_PARAMETER]}) if m.name == name]
        if not found:
            raise RuntimeError(f"{name}: not among the models this config serves")
        self.model = found[0]
        self.inputs = [n for n, _, _ in self.model.inputs]

    def execute(self, requests: list[Any]) -> list[Any]:
        import triton_python_backend_utils as pb_utils  # the backend's own module, there only inside its stub

        if not self.model.batching:
            return [self._answer(pb_utils, [request])[0] for request in requests]
        return self._answer(pb_utils, requests)

    def _answer(self, pb_utils: Any, requests: list[Any]) -> list[Any]:
        """One run of the model over `requests` stacked along their first dimension (a batched model;
        one request otherwise); each request gets its rows back, or every one the run's error."""
        wires = [{n: pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in self.inputs} for r in requests]
        try:
            if len(wires) == 1:
                results = [self.model.infer(**wires[0])]
            else:
                sizes = [len(w[self.inputs[0]]) for w in wires]
                merged = self.model.infer(**{n: np.concatenate([w[n] for w in wires]) for n in self.inputs})
                cuts = np.cumsum(sizes)[:-1]
                parts = {k: np.split(v, cuts) for k, v in merged.items()}
                results = [{k: parts[k][i] for k in merged} for i in range(len(wires))]
        except Exception as exc:  # noqa: BLE001 — the client sees it as the call's error (never the tensors)
            error = pb_utils.TritonError(str(exc))  # the client names the model it called
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(k, np.ascontiguousarray(v)) for k, v in r.items()])
                for r in results]
