"""Activations as numpy arrays, named as TransformerLens names them.

A ``.trace`` file (written by ``TRACE … SAVE 'f.trace'``, or by
``Connection.run_with_cache``) is read by the engine's own checked reader, and each array
becomes a numpy array that owns the loaded buffer (no copy). Per-layer names are views into
the stacked arrays:

=====================================  ========================  ===========================
name                                   shape                     from the file
=====================================  ========================  ===========================
``hook_embed``                         ``[pos, d_model]``        ``embedding``
``blocks.L.hook_resid_pre``            ``[pos, d_model]``        ``embedding`` / ``residual[L-1]``
``blocks.L.hook_attn_out``             ``[pos, d_model]``        ``attn_delta[L]``
``blocks.L.hook_mlp_out``              ``[pos, d_model]``        ``ffn_delta[L]``
``blocks.L.hook_resid_post``           ``[pos, d_model]``        ``residual[L]``
``blocks.L.ln2.hook_normalized``       ``[pos, d_model]``        ``ffn_input[L]`` (the FFN's normed input)
``blocks.L.mlp.hook_pre``              ``[pos, d_mlp]``          ``gate[L]`` (gate pre-activation)
``blocks.L.mlp.hook_post``             ``[pos, d_mlp]``          ``activation[L]`` (act(gate)·up)
``blocks.L.attn.hook_pattern``         ``[head, query, key]``    ``attention[L]`` (transposed view)
=====================================  ========================  ===========================

``cache.stack("resid_post")`` gives the stacked ``[layer, pos, d_model]`` array itself.
TransformerLens adds a batch axis; a cache here is one prompt (a list of prompts gives a
list of caches).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _lql

if TYPE_CHECKING:
    from ._display import Svg

# Stacked names (cache.stack) → the file's array.
_STACKS = {
    "resid_post": "residual",
    "attn_out": "attn_delta",
    "mlp_out": "ffn_delta",
    "normalized": "ffn_input",
    "pre": "gate",
    "post": "activation",
    "pattern": "attention",
}

# Per-layer hook names → the stacked name.
_HOOKS = {
    "hook_resid_post": "resid_post",
    "hook_attn_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "ln2.hook_normalized": "normalized",
    "mlp.hook_pre": "pre",
    "mlp.hook_post": "post",
    "attn.hook_pattern": "pattern",
}


class ActivationCache:
    """The activations of one prompt, by TransformerLens name (a read-only mapping)."""

    def __init__(self, loaded: Mapping[str, Any], path: str = "") -> None:
        self.path = path
        self.arrays: Dict[str, np.ndarray] = loaded["arrays"]
        for a in self.arrays.values():
            a.flags.writeable = False
        #: Every prompt token id.
        self.tokens: List[int] = loaded["tokens"]
        #: The positions kept (all of them for run_with_cache).
        self.positions: List[int] = loaded["positions"]
        #: Free JSON saved with the trace: prompt, model, target, norm_eps, written_by.
        self.meta: dict = json.loads(loaded["meta"]) if loaded["meta"] else {}
        self.n_layers: int = loaded["n_layers"]
        self.n_heads: int = loaded["n_heads"]
        self.d_model: int = loaded["hidden"]
        self.d_mlp: int = loaded["ffn"]
        self.context: int = loaded["context"]

    @property
    def prompt(self) -> str:
        """The prompt the trace ran (``meta["prompt"]``; empty if the file does not say)."""
        return self.meta.get("prompt", "")

    def stack(self, name: str) -> np.ndarray:
        """A stacked array: ``resid_post``, ``attn_out``, ``mlp_out``, ``normalized``
        (``[layer, pos, d_model]``), ``pre``, ``post`` (``[layer, pos, d_mlp]``),
        ``pattern`` (``[layer, pos, head, key]``, as stored), ``embed`` (``[pos, d_model]``)
        or ``final_logits`` (``[vocab]``)."""
        if name in ("embed", "hook_embed"):
            return self.arrays["embedding"]
        if name == "final_logits":
            return self.arrays["final_logits"]
        file_name = _STACKS.get(name, name)
        if file_name not in self.arrays:
            raise KeyError(f"{name!r}: this trace holds {sorted(self.arrays)}")
        return self.arrays[file_name]

    def __getitem__(self, key: str) -> np.ndarray:
        if key == "hook_embed":
            return self.arrays["embedding"]
        if key.startswith("blocks."):
            parts = key.split(".", 2)
            if len(parts) == 3 and parts[1].isdigit():
                layer, hook = int(parts[1]), parts[2]
                if not 0 <= layer < self.n_layers:
                    raise KeyError(f"{key!r}: the model has {self.n_layers} layers")
                if hook == "hook_resid_pre":
                    return self.arrays["embedding"] if layer == 0 else self.arrays["residual"][layer - 1]
                stacked = _HOOKS.get(hook)
                if stacked is not None and _STACKS[stacked] in self.arrays:
                    a = self.arrays[_STACKS[stacked]][layer]
                    # Stored [query, head, key]; TransformerLens reads [head, query, key].
                    return a.transpose(1, 0, 2) if stacked == "pattern" else a
        raise KeyError(key)

    def keys(self) -> List[str]:
        """Every TransformerLens name this cache answers, layer by layer."""
        names = ["hook_embed"]
        for layer in range(self.n_layers):
            names.append(f"blocks.{layer}.hook_resid_pre")
            for hook, stacked in _HOOKS.items():
                if _STACKS[stacked] in self.arrays:
                    names.append(f"blocks.{layer}.{hook}")
        return names

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
            return True
        except KeyError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def items(self) -> Iterator[Tuple[str, np.ndarray]]:
        """``(name, array)`` pairs, in ``keys()`` order."""
        return ((k, self[k]) for k in self.keys())

    def __repr__(self) -> str:
        return (
            f"<lql.ActivationCache {self.prompt!r}: {len(self.positions)} positions × "
            f"{self.n_layers} layers, d_model={self.d_model}, d_mlp={self.d_mlp}>"
        )

    def _repr_svg_(self) -> str:
        """For notebooks: ‖resid_post‖ per layer and position as a heat map."""
        from ._display import activation_norms_svg

        return activation_norms_svg(self)

    def attention_svg(self, layer: int, head: int, tokens: Optional[Sequence[str]] = None) -> "Svg":
        """One head's pattern, ``self[f"blocks.{layer}.attn.hook_pattern"][head]``, as an
        SVG heat map (queries down, keys across) that notebooks draw inline; a ``str``.
        ``tokens``: every prompt token's text (``TOKENIZE``'s ``token`` column) to label
        the positions."""
        from ._display import attention_svg

        return attention_svg(self, layer, head, tokens)


def load_trace(path: Union[str, "os.PathLike[str]"]) -> ActivationCache:
    """Opens a ``.trace`` file as an :class:`ActivationCache` (checked by the engine's
    reader: a damaged or hostile file raises ``lql.DataError``)."""
    path = os.fspath(path)
    return ActivationCache(_lql.load_trace(path), path)
