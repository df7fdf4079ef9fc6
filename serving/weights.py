"""Moving named weight tensors into a running vLLM engine.

The learner hands ``{name: numpy array}`` (zero-copy through Ray's object store; bfloat16 travels as an
int16 view, see ``to_numpy``). Tensors cannot cross vLLM's ``collective_rpc`` to the engine process, so
each tensor goes as ``(name, dtype, shape, bytes)`` and the worker extension rebuilds it and reloads the
model in place with ``reload_weights`` (which also re-runs the CPU weight prepacking). Send every
tensor of the state dict, ``lm_head.weight`` included: with tied embeddings the output layer otherwise
keeps its old weights.
"""

from __future__ import annotations

import numpy as np

Encoded = list[tuple[str, str, list[int], bytes]]


def to_numpy(state: dict) -> dict[str, np.ndarray]:
    """Torch tensors -> numpy arrays for the object store (bfloat16 as an int16 view)."""
    import torch

    arrays = {}
    for name, tensor in state.items():
        tensor = tensor.detach().cpu().contiguous()
        if tensor.dtype == torch.bfloat16:
            arrays[name + "::bfloat16"] = tensor.view(torch.int16).numpy()
        else:
            arrays[name] = tensor.numpy()
    return arrays


def encode(arrays: dict[str, np.ndarray]) -> Encoded:
    """Numpy arrays -> what ``collective_rpc`` can carry."""
    encoded = []
    for name, array in arrays.items():
        dtype = str(array.dtype)
        if name.endswith("::bfloat16"):
            name, dtype = name.removesuffix("::bfloat16"), "bfloat16"
        encoded.append((name, dtype, list(array.shape), np.ascontiguousarray(array).tobytes()))
    return encoded


def decode(encoded: Encoded):
    """What ``collective_rpc`` carried -> (name, torch tensor) pairs."""
    import torch

    for name, dtype, shape, buffer in encoded:
        if dtype == "bfloat16":
            array = np.frombuffer(buffer, dtype=np.int16).reshape(shape)
            yield name, torch.from_numpy(array.copy()).view(torch.bfloat16)
        else:
            yield name, torch.from_numpy(np.frombuffer(buffer, dtype=dtype).reshape(shape).copy())


class WeightSyncExtension:
    """Mixed into vLLM's worker (``worker_extension_cls="serving.weights.WeightSyncExtension"``)."""

    def load_encoded_weights(self, encoded: Encoded) -> int:
        self.model_runner.reload_weights(weights_iterator=decode(encoded))
        return len(encoded)
