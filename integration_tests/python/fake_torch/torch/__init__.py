"""A stand-in for torch with just what cumemtrace's Python side reads: CUDA tensors at
made-up addresses, modules with parameters and buffers, an optimizer with state, and the
global hooks torch calls at the same moments (module registration, first call, optimizer
step). It lets CI run the real cumemtrace_categories.py without a GPU or torch."""
_next_address = [0x7F0000000000]


class _Storage:
    def __init__(self, address):
        self._address = address

    def data_ptr(self):
        return self._address


class Tensor:
    """storage=False: a tensor without storage of its own (sparse, or a wrapper subclass),
    whose data_ptr() raises as torch's does."""

    def __init__(self, nbytes, device=0, offset=0, base=None, storage=True):
        self._storage = storage
        if base is None:
            base = _next_address[0]
            _next_address[0] += (nbytes + 511) // 512 * 512
        self._base = base
        self._offset = offset
        self._device = device
        self.nbytes = nbytes
        self.grad = None

    def get_device(self):
        return self._device

    def data_ptr(self):
        if not self._storage:
            raise RuntimeError("Cannot access data pointer of Tensor that doesn't have storage")
        return self._base + self._offset

    def storage_offset(self):
        return self._offset // 4

    def untyped_storage(self):
        return _Storage(self._base)


from torch import nn, optim  # noqa: E402,F401  (torch imports both at its own import)
