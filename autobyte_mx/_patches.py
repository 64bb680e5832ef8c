"""Make ``gluon.Trainer(..., kvstore='autobyte')`` use AutoByte, in forward layer order.

Three small wraps, installed once by ``import autobyte_mx``:

- ``trainer._create_kvstore``: with one device, MXNet creates *no* kvstore for a name without
  'dist' (mxnet/model.py), so 'autobyte' would silently train unsynchronised.
- ``Trainer.__init__``: records the order of the ParameterDict it was given (registration
  order, which is forward order for Sequential and gluon.model_zoo models) before the Trainer
  sorts parameters by name.
- ``Trainer._init_kvstore`` / ``Trainer.step``: hand AutoByte the key -> name map, that
  forward order, the keys pushed every step, and the batch size (for samples/s).
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["install"]


def install(trainer_module: Any, kvstore_cls: type[Any]) -> None:
    trainer_cls = trainer_module.Trainer
    if getattr(trainer_cls, "_autobyte_installed", False):
        return
    original_create = trainer_module._create_kvstore
    original_init = trainer_cls.__init__
    original_init_kv = trainer_cls._init_kvstore
    original_step = trainer_cls.step
    name = kvstore_cls.__name__.lower()

    @functools.wraps(original_create)
    def create_kvstore(kvstore: Any, num_device: int, arg_params: Any) -> Any:
        if isinstance(kvstore, str) and kvstore.lower() == name:
            kvstore = kvstore_cls()
        return original_create(kvstore, num_device, arg_params)

    @functools.wraps(original_init)
    def init(self: Any, params: Any, *args: Any, **kwargs: Any) -> None:
        if hasattr(params, "keys"):
            forward = [p.name for p in params.values()]
        else:
            forward = [p.name for p in params] if isinstance(params, (list, tuple)) else []
        self._autobyte_forward = forward
        original_init(self, params, *args, **kwargs)

    @functools.wraps(original_init_kv)
    def init_kvstore(self: Any) -> None:
        original_init_kv(self)
        if isinstance(self._kvstore, kvstore_cls):
            self._kvstore.attach_trainer(
                names=[p.name for p in self._params],
                forward=getattr(self, "_autobyte_forward", []),
                active=[i for i, p in enumerate(self._params) if p.grad_req != "null"])

    @functools.wraps(original_step)
    def step(self: Any, batch_size: int, ignore_stale_grad: bool = False) -> None:
        if isinstance(self._kvstore, kvstore_cls):
            self._kvstore.note_batch(batch_size)
        original_step(self, batch_size, ignore_stale_grad)

    trainer_module._create_kvstore = create_kvstore
    trainer_cls.__init__ = init
    trainer_cls._init_kvstore = init_kvstore
    trainer_cls.step = step
    trainer_cls._autobyte_installed = True
