import torch

_parameter_hooks = []
_buffer_hooks = []
_forward_pre_hooks = {}


class _Handle:
    def __init__(self, table, key):
        self._table, self._key = table, key

    def remove(self):
        self._table.pop(self._key, None)


def register_module_parameter_registration_hook(hook):
    _parameter_hooks.append(hook)


def register_module_buffer_registration_hook(hook):
    _buffer_hooks.append(hook)


def register_module_forward_pre_hook(hook):
    key = object()
    _forward_pre_hooks[key] = hook
    return _Handle(_forward_pre_hooks, key)


class Parameter(torch.Tensor):
    pass


class Module:
    def __init__(self):
        self._parameters = {}
        self._buffers = {}

    def register_parameter(self, name, value):
        for hook in _parameter_hooks:
            hook(self, name, value)
        self._parameters[name] = value

    def register_buffer(self, name, value):
        for hook in _buffer_hooks:
            hook(self, name, value)
        self._buffers[name] = value

    def parameters(self):
        return list(self._parameters.values())

    def __call__(self, *args):
        for hook in list(_forward_pre_hooks.values()):
            hook(self, args)
        return self.forward(*args)
